// Command handoff makes, passes on, checks and shows agent handoff context
// elements: signed offers, signed statuses and the Handoff that carries an
// offer with its chain. Its flags, output lines and exit codes are the
// contract of SPEC.md section 4: exit 0 on success, 1 when a verdict is
// negative, 2 on a usage or I/O error with one line on stderr.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

const usage = `Usage:
    handoff keygen [--out FILE]
    handoff pubkey KEYFILE
    handoff offer --key KEYFILE --iss ID --aud ID --dialog ID [--task ID]
                  [--ttl SECONDS] [--now UNIX] [--obo SUB] [--grant-file FILE]
                  [--ref-file FILE ...] [--add-ref REFFILE ...] [--from HANDOFF]
                  [--cose] [--cbor]
    handoff status --key KEYFILE --from HANDOFF --state STATE [--reason R]
                  [--detail TEXT] [--iss ID] [--now UNIX] [--cose] [--cbor]
    handoff verify --trust TRUSTFILE --me ID [--now UNIX] [--skew S]
                  [--max-lifetime S] [--max-chain N] [--dialog ID]
                  [--require-full-chain] [--state DIR] [--require-refs]
                  [--ref-octets INDEX=FILE ...] [--ref-salt INDEX=B64U ...]
                  [--scitt-service ID ...] FILE...
    handoff ref [--salted] [--loc URI] FILE
    handoff verify-status --trust TRUSTFILE --from HANDOFF [--now UNIX] STATUS...
    handoff inspect [--trust TRUSTFILE] [--me ID] [--now UNIX] [--json] [--svg SVGFILE] FILE
    handoff demo [--keep] [--json]
    handoff trust add --id ID KEYFILE [TRUSTFILE]
    handoff trust list TRUSTFILE
    handoff serve --config FILE [--validate-only] [--print-schema]
    handoff conformance (--exec COMMAND | --cli PATH | --driver) [--kit DIR]
                  [--baseline FILE] [--results FILE] [--run REGEXP]
                  [--corpus-digest HEX] [--timeout DURATION]
    handoff help [COMMAND]
    handoff version

A delegator signs an offer for a delegate; the delegate checks it and
answers with a signed status. An offer passed on carries the offers before
it as its chain, linked by SHA-256 digests. Input is JSON or CBOR, by
content; output is JSON unless --cbor is given.

Examples:
    $ handoff keygen --out planner.jwk
    $ handoff pubkey planner.jwk > planner.pub
    $ handoff trust add --id https://planner.example planner.pub trust.json
    $ handoff offer --key assistant.jwk --iss https://assistant.example \
          --aud https://planner.example --dialog ctx-1 > h1.json
    $ handoff offer --key planner.jwk --iss https://planner.example \
          --aud https://coder.example --dialog ctx-1 --from h1.json > h2.json
    $ handoff verify --trust trust.json --me https://coder.example h2.json
    {"file":"h2.json","result":"accepted","offer":"...","chain":"full","refs":[]}
    $ handoff status --key coder.jwk --from h2.json --state accepted > s.jws
    $ handoff verify-status --trust trust.json --from h2.json s.jws
    $ handoff inspect --trust trust.json h2.json
    $ handoff ref --salted prompt.txt > prompt.ref   # prompts: always salted
    $ handoff offer --key planner.jwk --iss https://planner.example \
          --aud https://coder.example --dialog ctx-1 --add-ref prompt.ref > h3.json
    $ handoff verify --trust trust.json --me https://coder.example \
          --require-refs --ref-octets 0=prompt.txt \
          --ref-salt 0=$(jq -r .salt prompt.ref) h3.json
    {"file":"h3.json","result":"accepted","offer":"...","chain":"absent","refs":["verified"]}

Exit status: 0 success, 1 negative verdict, 2 usage or I/O error.
"handoff help COMMAND" (or "handoff COMMAND --help") describes a command's flags.
`

// usageError is a bad invocation: exit 2 with a hint.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errNegative is a negative verdict already printed: exit 1.
var errNegative = errors.New("negative verdict")

// errReported is a usage or I/O error whose lines are already printed:
// exit 2.
var errReported = errors.New("reported")

type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

func main() {
	os.Exit(run(os.Args[1:], env{os.Stdin, os.Stdout, os.Stderr}))
}

var commands = map[string]func(env, []string) error{
	"keygen":        cmdKeygen,
	"pubkey":        cmdPubkey,
	"offer":         cmdOffer,
	"status":        cmdStatus,
	"verify":        cmdVerify,
	"verify-status": cmdVerifyStatus,
	"inspect":       cmdInspect,
	"ref":           cmdRef,
	"demo":          cmdDemo,
	"trust":         cmdTrust,
	"serve":         cmdServe,
	"conformance":   cmdConformance,
	"version":       cmdVersion,
}

func init() { commands["help"] = cmdHelp } // cmdHelp reads commands

func run(args []string, e env) int {
	if len(args) == 0 {
		// The usage, where a newcomer looks first; exit 2 as for any
		// invocation that does nothing.
		fmt.Fprint(e.stderr, usage)
		return 2
	}
	name := args[0]
	if name == "-h" || name == "--help" {
		name = "help"
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(e.stderr, "handoff: error: unknown command %q; \"handoff help\" lists them\n", name)
		return 2
	}
	err := cmd(e, args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		var he helpError
		errors.As(err, &he)
		fmt.Fprint(e.stdout, commandHelp(name, he.fs))
		return 0
	case errors.Is(err, errNegative):
		return 1
	case errors.Is(err, errReported):
		return 2
	}
	// One line on stderr (SPEC.md section 4); library errors already say
	// "handoff:", which the line does once.
	// The message may quote members of an element that nobody verified:
	// safeText keeps them from drawing on the terminal (decision 52).
	msg := strings.ReplaceAll(err.Error(), "handoff: ", "")
	fmt.Fprintf(e.stderr, "handoff: error: %s: %s\n", name, safeText(strings.ReplaceAll(msg, "\n", " ")))
	printHint(e, err)
	return 2
}

// newFlags returns a FlagSet that reports errors instead of exiting.
func newFlags(name string, e env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses flags; flag errors are usage errors. Flags may come before
// or after the positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, helpError{fs}
			}
			// The flag package names flags with one dash; this command's
			// words use two, and say where the flags are described.
			msg := strings.Replace(err.Error(), "flag provided but not defined: -", "unknown flag --", 1)
			msg = strings.Replace(msg, " for flag -", " for --", 1)
			msg = strings.Replace(msg, "flag needs an argument: -", "flag needs an argument: --", 1)
			return nil, usagef("%s (\"handoff help %s\" lists the flags)", msg, fs.Name())
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// renamedFlag is a flag's old name: giving it is a usage error that names
// the new one, and help does not list it. (--ref became --add-ref: beside
// --ref-file, the old name read as the reverse of what it did.)
type renamedFlag string

func (r renamedFlag) String() string { return "" }
func (r renamedFlag) Set(string) error {
	return fmt.Errorf("this flag was renamed --%s", string(r))
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// required names every flag of names that was not given, or given
// empty, at once.
func required(fs *flag.FlagSet, names ...string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var missing, empty []string
	for _, n := range names {
		switch {
		case !set[n]:
			missing = append(missing, "--"+n)
		case fs.Lookup(n).Value.String() == "":
			empty = append(empty, "--"+n)
		}
	}
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, listed(missing)+map[bool]string{true: " is", false: " are"}[len(missing) == 1]+" required")
	}
	if len(empty) > 0 {
		parts = append(parts, listed(empty)+" must not be empty")
	}
	if len(parts) > 0 {
		return usagef("%s", strings.Join(parts, "; "))
	}
	return nil
}

// listed joins names as a sentence does: "a", "a and b", "a, b and c".
func listed(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// isTerminal reports whether w is a terminal, where binary output would
// draw on the screen.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// commandUsage is the part of usage for the command name: its synopsis
// lines, for "handoff NAME -h".
func commandUsage(name string) string {
	var b strings.Builder
	b.WriteString("Usage:\n")
	in := false
	for _, line := range strings.Split(usage, "\n") {
		switch {
		case strings.HasPrefix(line, "    handoff "):
			in = strings.HasPrefix(line, "    handoff "+name+" ") || line == "    handoff "+name
		case !strings.HasPrefix(line, "                  "):
			in = false
		}
		if in {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
