package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/demo"
)

// cmdDemo runs the four-agent demo (package cmd/handoff/internal/demo): exit 0 when
// every scenario gave its expected verdict, 1 otherwise, 2 when the agents
// could not be started.
func cmdDemo(e env, args []string) error {
	fs := newFlags("demo", e)
	keep := fs.Bool("keep", false, "keep the agents running after the scenarios, until interrupted")
	asJSON := fs.Bool("json", false, "print the timeline as JSON lines")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	// SIGINT ends the demo cleanly at any point: the agents stop and the
	// temporary directory is removed.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w, err := demo.Start(ctx)
	if err != nil {
		return fmt.Errorf("starting the agents: %w", err)
	}
	defer w.Close()
	tl := w.Run(ctx, demo.Options{Out: e.stdout, JSON: *asJSON, Color: !*asJSON && colorful(e)})
	if *keep && ctx.Err() == nil {
		showKept(e, w, *asJSON)
		<-ctx.Done()
		fmt.Fprintln(e.stderr, "handoff: demo: interrupted; agents stopped, "+w.Dir()+" removed")
	}
	if !tl.OK() {
		var names []string
		for _, s := range tl.Failed() {
			names = append(names, s.Name)
		}
		if len(names) == 0 {
			names = append(names, "none ran")
		}
		fmt.Fprintf(e.stderr, "handoff: demo: unexpected verdicts in: %s\n", strings.Join(names, ", "))
		return errNegative
	}
	return nil
}

// colorful: ANSI colour only on a terminal, and not when NO_COLOR is set
// (https://no-color.org) or TERM is dumb.
func colorful(e env) bool {
	f, ok := e.stdout.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func showKept(e env, w *demo.World, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(map[string]any{"kept": w.Agents(), "dir": w.Dir()})
		fmt.Fprintf(e.stdout, "%s\n", b)
		return
	}
	fmt.Fprintf(e.stdout, "\nThe agents keep running until Ctrl-C (which removes %s):\n", w.Dir())
	for _, a := range w.Agents() {
		fmt.Fprintf(e.stdout, "  %-9s %-3s  %s\n", a.Name, a.Serves, a.URL)
		fmt.Fprintf(e.stdout, "            key %s  trust %s  store %s  log %s\n",
			filepath.Base(a.Key), filepath.Base(a.Trust), filepath.Base(a.Store), filepath.Base(a.Log))
	}
	fmt.Fprintf(e.stdout, "Bearer tokens (who calls whom): %s\n", filepath.Join(w.Dir(), "tokens.json"))
	fmt.Fprintf(e.stdout, "Agent cards: <url>/.well-known/agent-card.json (assistant, planner, coder)\n")
	self, err := os.Executable()
	if err != nil {
		self = "handoff"
	}
	if p, err := w.WriteTryScript(self); err == nil {
		fmt.Fprintf(e.stdout, "Hand the planner a task yourself: sh %s \"Write a changelog entry\"\n", p)
	}
}
