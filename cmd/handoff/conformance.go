package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/quantumlearningmachines/handoff/conformance"
)

// cmdConformance runs the conformance kit (conformance/README.md) against
// an implementation: one that speaks the driver protocol (--exec), or a
// binary with SPEC.md section 4's commands (--cli). --driver is this
// implementation's own driver: `handoff conformance --exec 'handoff
// conformance --driver'` runs the kit against this build.
func cmdConformance(e env, args []string) error {
	fs := newFlags("conformance", e)
	execCmd := fs.String("exec", "", "run `COMMAND` (with sh -c) as the implementation's driver: cases as JSON lines on its stdin, one answer line each on its stdout")
	cli := fs.String("cli", "", "drive `PATH`, a binary with SPEC.md section 4's verify, verify-status, offer and status commands")
	driver := fs.Bool("driver", false, "be the driver of this implementation: answer the cases on stdin (what --exec runs)")
	kitDir := fs.String("kit", "conformance/v1", "the kit folder `DIR` (its manifest.json lists every file with its SHA-256)")
	baseline := fs.String("baseline", "", "a `FILE` of case ids known not to pass (they fail, or the driver skips them), one a line, # for comments: they do not fail the run, but one that passes does (stale)")
	results := fs.String("results", "results.json", "write the results, with the kit's corpus digest, to `FILE`")
	match := fs.String("run", "", "run only the cases whose id matches `REGEXP` (rows with cases left out are at best partial)")
	corpus := fs.String("corpus-digest", "", "refuse a kit whose corpus digest is not `HEX` (the kit's manifest.json, corpusDigest; docs/conformance.md gives this release's)")
	timeout := fs.Duration("timeout", 30*time.Second, "the longest to wait for one answer")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if *driver {
		if *execCmd != "" || *cli != "" {
			return usagef("--driver answers cases; it takes no --exec or --cli")
		}
		return conformance.Serve(e.stdin, e.stdout, conformance.Library{})
	}
	if (*execCmd == "") == (*cli == "") {
		return usagef("give one of --exec COMMAND or --cli PATH (or --driver)")
	}
	if *timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	o := conformance.RunOptions{}
	if *match != "" {
		if o.Match, err = regexp.Compile(*match); err != nil {
			return usagef("--run: %v", err)
		}
	}
	if *baseline != "" {
		if o.Baseline, err = conformance.ReadBaseline(*baseline); err != nil {
			return err
		}
	}
	k, err := conformance.LoadKit(*kitDir)
	if err != nil {
		return err
	}
	if *corpus != "" && *corpus != k.Manifest.CorpusDigest {
		return fmt.Errorf("the kit in %s has corpus digest %s, not the %s asked for: another version of the kit, or one changed by hand", *kitDir, k.Manifest.CorpusDigest, *corpus)
	}
	var d conformance.Driver
	if *execCmd != "" {
		o.Implementation = "--exec " + *execCmd
		d, err = conformance.StartExec(*execCmd, nil, e.stderr, *timeout)
	} else {
		o.Implementation = "--cli " + *cli
		d, err = conformance.NewCLIDriver(*cli, *timeout)
	}
	if err != nil {
		return err
	}
	rep, err := conformance.Run(context.Background(), k, d, o)
	if cerr := d.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if rep != nil {
		// Printed and written even when the run stopped: the verdicts
		// given so far are kept, and the report says where it stopped.
		rep.WriteTable(e.stdout)
		b, merr := json.MarshalIndent(rep, "", "  ")
		if merr != nil {
			return merr
		}
		if werr := os.WriteFile(*results, append(b, '\n'), 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return fmt.Errorf("the harness stopped: %w", err)
	}
	if !rep.OK() {
		fmt.Fprintf(e.stderr, "handoff: conformance: %d cases failed, %d were not tested, %d baseline entries are stale (see %s)\n",
			rep.Summary.Cases[conformance.Fail], rep.Summary.Cases[conformance.NotTested], rep.Summary.Cases[conformance.StaleListing], *results)
		return errNegative
	}
	return nil
}
