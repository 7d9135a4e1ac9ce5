package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/quantumlearningmachines/handoff/trust"
)

// cmdTrust is "handoff trust add|list": the trust file, made and read by
// the tool rather than assembled by hand.
func cmdTrust(e env, args []string) error {
	if len(args) == 0 {
		return usagef(`want a subcommand: add or list ("handoff help trust")`)
	}
	switch args[0] {
	case "add":
		return trustAdd(e, args[1:])
	case "list":
		return trustList(e, args[1:])
	case "-h", "-help", "--help":
		return trustAdd(e, args) // its flags are the only ones
	}
	return usagef(`unknown subcommand %q: want add or list ("handoff help trust")`, args[0])
}

// trustAdd binds the public key in KEYFILE to --id in TRUSTFILE (created
// if absent), or prints the new trust file when TRUSTFILE is not given.
// It refuses a private key (a trust file is public) and a key already in
// the file, under any agent, by kid or by thumbprint: one key bound to two
// agents lets either speak as the other.
func trustAdd(e env, args []string) error {
	fs := newFlags("trust", e)
	id := fs.String("id", "", "the AgentId that signs with this key (an offer's or status's iss)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usagef("add: want KEYFILE and at most one TRUSTFILE")
	}
	if err := required(fs, "id"); err != nil {
		return err
	}
	keyFile := pos[0]
	b, err := readBounded(keyFile, trust.MaxFileSize)
	if err != nil {
		return err
	}
	if _, _, perr := trust.ParsePrivateJWK(b); perr == nil {
		return fmt.Errorf("add: %s is a private key, and a trust file is public: add its public half "+
			"(handoff pubkey %s > %s.pub, then handoff trust add --id %s %s.pub ...)", keyFile, keyFile, keyFile, *id, keyFile)
	}
	k, err := trust.ParsePublicJWK(b)
	if err != nil {
		return fmt.Errorf("add: %s: %w", keyFile, err)
	}

	c := trust.New()
	var target string
	if len(pos) == 2 {
		target = pos[1]
		// From reading the file to replacing it, one run at a time.
		unlock, err := lockDir(filepath.Dir(resolved(target)))
		if err != nil {
			return fmt.Errorf("trust file %s: locking its folder: %w", target, err)
		}
		defer unlock()
		switch old, err := trust.Load(target); {
		case err == nil:
			c = old
		case errors.Is(err, os.ErrNotExist):
			// Created below.
		default:
			return fmt.Errorf("trust file %s: %w", target, err)
		}
	}
	thumb := trust.Thumbprint(k.Public)
	for _, agent := range c.Agents() {
		for _, have := range c.Keys(agent, "") {
			switch {
			case have.Kid == k.Kid:
				return fmt.Errorf("add: %s already binds a key with kid %q to %q", displayName(target), k.Kid, agent)
			case trust.Thumbprint(have.Public) == thumb:
				return fmt.Errorf("add: %s already binds this key (kid %q) to %q", displayName(target), have.Kid, agent)
			}
		}
	}
	if err := c.Add(*id, k); err != nil {
		return fmt.Errorf("add: %w", err)
	}
	out, err := c.MarshalJSON()
	if err != nil {
		return err
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, out, "", "  "); err != nil {
		return err
	}
	pretty.WriteByte('\n')
	if _, err := trust.Parse(pretty.Bytes()); err != nil {
		return fmt.Errorf("add: the new trust file would not read back: %w", err) // a bug; nothing written
	}
	if target == "" {
		_, err := e.stdout.Write(pretty.Bytes())
		return err
	}
	if err := writeReplacing(target, pretty.Bytes()); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "handoff: added key %s for %s to %s\n", safeText(k.Kid), safeText(*id), safeText(target))
	return nil
}

// trustList prints each key of a trust file: the agent, the kid and the
// algorithm, one key per line.
func trustList(e env, args []string) error {
	fs := newFlags("trust", e)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("list: want exactly one TRUSTFILE")
	}
	c, err := loadTrust(pos[0])
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "AGENT\tKID\tALG")
	for _, agent := range c.Agents() {
		for _, k := range c.Keys(agent, "") {
			fmt.Fprintf(w, "%s\t%s\t%s\n", safeText(agent), safeText(k.Kid), k.Alg)
		}
	}
	return w.Flush()
}

func displayName(path string) string {
	if path == "" {
		return "the trust file"
	}
	return path
}

// resolved is path with its symbolic links followed, or path as it is
// when they cannot be (it does not exist yet).
func resolved(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	return path
}

// writeReplacing writes b to path through a temporary file in the same
// folder, renamed over it, so that a crash or a full disk never leaves a
// half-written trust file. A new file is readable by all (it holds public
// keys only); an existing one keeps its mode.
func writeReplacing(path string, b []byte) error {
	// A trust file reached through a symbolic link is updated where it
	// is, not replaced by a file of its own at the link.
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if _, err := filepath.EvalSymlinks(path); err != nil {
			return fmt.Errorf("%s is a symbolic link to nothing: %w", path, err)
		}
	}
	path = resolved(path)
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".trust-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename, there is nothing to remove
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
