package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/gateway"
)

// cmdServe is "handoff serve": the gateway of docs/spec.md section 6. With
// --validate-only it checks the configuration (and the files it names)
// and prints one line per problem, "KEY.PATH (line N): what"; exit 2 when
// there is any.
func cmdServe(e env, args []string) error {
	fs := newFlags("serve", e)
	config := fs.String("config", "", "the gateway's configuration `FILE` (YAML; JSON is YAML)")
	validateOnly := fs.Bool("validate-only", false, "check FILE and the files it names, print each problem, and exit (0 when valid)")
	printSchema := fs.Bool("print-schema", false, "print the configuration's JSON Schema and exit")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q (the configuration file is given as --config FILE)", pos[0])
	}
	if *printSchema {
		_, err := e.stdout.Write(gateway.Schema)
		return err
	}
	if err := required(fs, "config"); err != nil {
		return err
	}
	c, err := gateway.Load(*config)
	if err == nil {
		var res *gateway.Resources
		// Serving, the gateway's log carries the warnings (once); checking,
		// this command prints them.
		if res, err = c.Open(); err == nil && *validateOnly {
			for _, w := range res.Warnings {
				fmt.Fprintf(e.stderr, "handoff: warning: serve: %s: %s\n", safeText(*config), safeText(w))
			}
		}
	}
	var ps gateway.Problems
	if errors.As(err, &ps) {
		// One line per problem (SPEC.md section 6), each naming the file.
		for _, p := range ps {
			fmt.Fprintf(e.stderr, "handoff: error: serve: %s: %s\n", safeText(*config), safeText(p.String()))
		}
		return errReported
	}
	if err != nil {
		return fmt.Errorf("%s: %w", *config, err)
	}
	if *validateOnly {
		fmt.Fprintf(e.stderr, "handoff: %s is valid\n", safeText(*config))
		return nil
	}
	log := slog.New(slog.NewJSONHandler(e.stderr, nil))
	return gateway.Run(context.Background(), *config, log, nil)
}
