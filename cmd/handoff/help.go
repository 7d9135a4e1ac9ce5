package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/quantumlearningmachines/handoff"
)

// helps is what "handoff CMD --help" and "handoff help CMD" print besides
// the synopsis and the flags: what the command is for, and one example.
var helps = map[string]struct{ about, example string }{
	"keygen": {
		"Makes a new P-256 private key as a JWK (kty, crv, x, y, d, alg ES256, and kid, its RFC 7638 thumbprint).\n" +
			"Keep it secret: with --out the file is written with mode 0600.",
		"handoff keygen --out planner.jwk"},
	"pubkey": {
		"Prints the public half of a private key as a JWK (always with alg and kid), for the trust file of\n" +
			"the agents that will check this key's signatures (handoff trust add does it for you).",
		"handoff pubkey planner.jwk"},
	"trust": {
		"Builds and reads trust files: which keys each agent signs with. A receiver uses a key only if its\n" +
			"trust file binds it to the message's iss (draft \"Learning Keys\").\n" +
			"  trust add --id ID KEYFILE [TRUSTFILE]\n" +
			"      binds the public key in KEYFILE to ID, creating TRUSTFILE or adding to\n" +
			"      it (without TRUSTFILE: prints the new file)\n" +
			"  trust list TRUSTFILE\n" +
			"      prints one line per key: the agent id, the kid and the alg",
		"handoff trust add --id https://planner.example planner.pub.jwk trust.json"},
	"offer": {
		"Signs an offer from --iss (the delegator, whose key is --key) to --aud (the delegate) and prints the\n" +
			"Handoff that carries it. With --from, the new offer passes on a received Handoff: its prev is the\n" +
			"received offer's digest and its chain the received chain plus that offer, octets unchanged.",
		"handoff offer --key planner.jwk --iss https://planner.example --aud https://coder.example --dialog ctx-1 > h.json"},
	"status": {
		"Signs a status answering the offer in --from and prints it as it is carried: a compact JWS (or,\n" +
			"with --cose, base64url COSE_Sign1) on one line. The delegate answers accepted, rejected, completed\n" +
			"or failed; the delegator sends canceled.",
		"handoff status --key coder.jwk --from h.json --state accepted > s.jws"},
	"verify": {
		"Runs the receiving checks of the draft on each Handoff, as the receiver --me trusting --trust, and\n" +
			"prints one JSON line per file: accepted, rejected (with the reason), retransmission or equivocation,\n" +
			"the offer's digest, the chain's quality and the refs' outcomes. Exit 0 only when every file was accepted.",
		"handoff verify --trust trust.json --me https://coder.example h.json"},
	"verify-status": {
		"Checks each signed status against the offer in --from (D9: signed by a party of that offer, naming\n" +
			"its digest) and prints one JSON line per status. Exit 0 only when all verified.",
		"handoff verify-status --trust trust.json --from h.json s.jws"},
	"inspect": {
		"Shows a Handoff or a status as a person reads it: every element decoded, its digests, and the chain\n" +
			"as a picture; with --trust, which key verified each element.",
		"handoff inspect --trust trust.json h.json"},
	"ref": {
		"Makes a context reference (ContextRef) for a file, for offer --add-ref. Use --salted for anything\n" +
			"guessable (prompts, short texts): a bare digest of them can be confirmed by guessing.",
		"handoff ref --salted prompt.txt > prompt.ref"},
	"demo": {
		"Runs an assistant, a planner, a coder and a tester as real A2A and MCP agents on this machine and plays seven\n" +
			"scenarios (a chain of handoffs, a replay, an equivocation, a broken chain, a cancel...), one line each.",
		"handoff demo"},
	"conformance": {
		"Runs the conformance kit (conformance/README.md: one JSON file per vector, each naming the draft's\n" +
			"requirements it checks) against an implementation, and prints a table per vector and per requirement,\n" +
			"with the share of MUST and SHOULD rows that pass; a row no vector tests counts against it. --exec runs\n" +
			"a driver that answers JSON lines; --cli drives a binary with this command's verify, verify-status,\n" +
			"offer and status. Exit 0 when every case passes (or does not, as --baseline lists), 1 when a case failed\n" +
			"or was not tested (the driver skipped it), 2 when the harness or the driver broke (the table and\n" +
			"results.json then hold the cases before).",
		"handoff conformance --kit conformance/v1 --exec 'handoff conformance --driver'"},
	"serve": {
		"Runs the gateway: the receiving checks, the durable hop record and signed statuses in front of an\n" +
			"unmodified A2A agent or MCP server (docs/gateway.md); with egress routes, offers signed for the agent's own\n" +
			"outbound calls too, linked to the work they serve (docs/three-agents has an example). FILE is YAML\n" +
			"(docs/spec.md section 6; --print-schema prints its JSON Schema); docs/gateway.yaml is a sample to copy.\n" +
			"Logs are JSON lines on stderr; the admin address serves /healthz, /readyz, /metrics, /config and, with\n" +
			"operator.tokens_file, the operator console /console/. SIGHUP reloads FILE (trust_file, inbound and the\n" +
			"operators; other keys need a restart), keeping the last good configuration when FILE is invalid; SIGTERM\n" +
			"drains and stops.",
		"handoff serve --config docs/gateway.yaml --validate-only"},
	"version": {
		"Prints this program's module version, the draft revision it implements, and the Go version.",
		"handoff version"},
}

// helpError is flag.ErrHelp from the FlagSet of a command, so that run
// can describe its flags.
type helpError struct{ fs *flag.FlagSet }

func (helpError) Error() string        { return flag.ErrHelp.Error() }
func (helpError) Is(target error) bool { return target == flag.ErrHelp }

// cmdHelp is "handoff help [CMD]": the usage, or one command's help.
func cmdHelp(e env, args []string) error {
	switch {
	case len(args) == 0:
		_, err := io.WriteString(e.stdout, usage)
		return err
	}
	return describe(e, args[0]) // "help trust add" describes trust
}

// describe prints the help of the command name: run with --help, it
// hands back its FlagSet (helpError).
func describe(e env, name string) error {
	cmd, ok := commands[name]
	if !ok {
		return usagef("unknown command %q; \"handoff help\" lists them", name)
	}
	var he helpError
	if err := cmd(e, []string{"--help"}); !errors.As(err, &he) {
		he.fs = nil // a command without flags
	}
	_, err := io.WriteString(e.stdout, commandHelp(name, he.fs))
	return err
}

// commandHelp is the help of the command name: its synopsis, what it is
// for, each flag with its meaning and default, and an example.
func commandHelp(name string, fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString(commandUsage(name))
	h := helps[name]
	if h.about != "" {
		b.WriteString("\n" + wrap(h.about, 78) + "\n")
	}
	if fs != nil {
		args := synopsisArgs(commandUsage(name))
		first := true
		fs.VisitAll(func(f *flag.Flag) {
			if _, old := f.Value.(renamedFlag); old {
				return
			}
			if first {
				b.WriteString("\nFlags:\n")
				first = false
			}
			arg, meaning := flag.UnquoteUsage(f)
			if a, ok := args[f.Name]; ok {
				arg = a // the synopsis's name for it
			}
			b.WriteString("  --" + f.Name)
			if arg != "" {
				b.WriteString(" " + arg)
			}
			if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "[]" && !strings.Contains(meaning, "(default") {
				meaning += fmt.Sprintf(" (default %s)", d)
			}
			b.WriteString("\n")
			for _, line := range strings.Split(wrap(meaning, 70), "\n") {
				b.WriteString("        " + line + "\n")
			}
		})
	}
	if h.example != "" {
		b.WriteString("\nExample:\n    $ " + h.example + "\n")
	}
	b.WriteString("\n\"handoff help\" lists every command.\n")
	return b.String()
}

// synopsisFlag is a flag in a synopsis, with the name of its argument.
var synopsisFlag = regexp.MustCompile(`--([a-z][a-z-]*)( [A-Z][A-Z0-9_=]*)?`)

// synopsisArgs returns the argument name the synopsis gives each flag
// ("" for a flag that takes none), so that the flag list uses the same
// words.
func synopsisArgs(synopsis string) map[string]string {
	m := map[string]string{}
	for _, g := range synopsisFlag.FindAllStringSubmatch(synopsis, -1) {
		m[g[1]] = strings.TrimSpace(g[2])
	}
	return m
}

// cmdVersion prints the module version, the draft revision and the Go
// version, one per line.
func cmdVersion(e env, args []string) error {
	fs := newFlags("version", e)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("takes no arguments")
	}
	version := "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			version += " (commit " + rev[:min(12, len(rev))]
			if modified == "true" {
				version += ", modified"
			}
			version += ")"
		}
	}
	_, err = fmt.Fprintf(e.stdout, "handoff %s\ndraft: %s\ngo: %s %s/%s\n", version, handoff.DraftRevision, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}

// wrap refills text to lines of at most width columns, joining the lines
// of a paragraph; a line that begins with a space (a table of
// subcommands) is kept as it is.
func wrap(text string, width int) string {
	var out []string
	var words []string
	flush := func() {
		line := ""
		for _, w := range words {
			if line != "" && len(line)+1+len(w) > width {
				out = append(out, line)
				line = ""
			}
			if line != "" {
				line += " "
			}
			line += w
		}
		if line != "" {
			out = append(out, line)
		}
		words = nil
	}
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, " ") {
			flush()
			out = append(out, l)
			continue
		}
		words = append(words, strings.Fields(l)...)
	}
	flush()
	return strings.Join(out, "\n")
}
