package delegate_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/trust"
)

// The crash test's child: it takes the hop, then either stops in the middle
// of the work (phase "before": the effect never commits) or right after
// the outcome commit (phase "after"), and waits to be killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("HANDOFF_CRASH_DIR")
	if dir == "" {
		t.Skip("run by TestCrashRecovery as a child process")
	}
	ctx := context.Background()
	d, s := crashDelegate(t, dir)
	defer s.Close()
	b, err := os.ReadFile(filepath.Join(dir, "offer.json"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil || !a.Take {
		t.Fatalf("child did not take the hop: %+v %v", a, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "accepted.status"), a.Status.Octets, 0o600); err != nil {
		t.Fatal(err)
	}
	switch os.Getenv("HANDOFF_CRASH_PHASE") {
	case "claimed":
		// Killed between the claim and the start of the work.
		os.Stdout.WriteString("claimed\n")
		select {}
	case "before":
		// The work has begun: its effect is written inside the outcome
		// transaction, which is still open when the process dies.
		_, err = d.RecordOutcome(ctx, a.Iss, a.Hop, effectOnly(func(tx *sql.Tx) (delegate.Outcome, error) {
			if _, err := tx.Exec(`INSERT INTO effects (hop) VALUES (?)`, a.Hop); err != nil {
				return delegate.Outcome{}, err
			}
			os.Stdout.WriteString("working\n")
			select {} // killed here, before the commit
		}))
		t.Fatalf("unreachable: %v", err)
	case "after":
		st, err := d.RecordOutcome(ctx, a.Iss, a.Hop, effectOnly(func(tx *sql.Tx) (delegate.Outcome, error) {
			_, err := tx.Exec(`INSERT INTO effects (hop) VALUES (?)`, a.Hop)
			return delegate.Outcome{State: store.Completed}, err
		}))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "completed.status"), st.Octets, 0o600); err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("committed\n")
		select {} // killed here, after the commit, before answering
	}
}

// crashDelegate opens the delegate of the crash test from the files in dir.
func crashDelegate(t *testing.T, dir string) (*delegate.Delegate, *sqlite.Store) {
	t.Helper()
	ctx := context.Background()
	keys, err := trust.Load(filepath.Join(dir, "trust.json"))
	if err != nil {
		t.Fatal(err)
	}
	kb, err := os.ReadFile(filepath.Join(dir, "coder.jwk"))
	if err != nil {
		t.Fatal(err)
	}
	k, _, err := trust.ParsePrivateJWK(kb)
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := handoff.NewSigner(k)
	s, err := sqlite.Open(ctx, filepath.Join(dir, "hops.db"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := delegate.New(ctx, delegate.Config{Options: handoff.Options{Me: "coder", Keys: keys}, Store: s, Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	return d, s
}

// "Knowing the Outcome" and "Asking Again" across a crash: a child process
// takes a hop and is killed with SIGKILL between the claim and the start
// of the work, in the middle of the work (before the outcome commit), or
// just after it. After the restart, Recover flags a hop left "accepted"
// with no outcome (once, however often it runs), the retransmission is
// answered from the record with the identical octets ("accepted", or
// "completed"), the work is never done twice, and nothing recorded is
// lost.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, phase := range []string{"claimed", "before", "after"} {
		t.Run(phase, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			w := newWorld(t)
			w.now = time.Now()
			writeCrashFiles(t, w, dir)
			// The store exists before the offer is issued, so its memory
			// began before it (the restart rule does not apply).
			s, err := sqlite.Open(ctx, filepath.Join(dir, "hops.db"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.DB().Exec(`CREATE TABLE effects (hop TEXT PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}
			if err := s.Forget(ctx, time.Now().Add(-time.Minute)); err != nil {
				t.Fatal(err)
			}
			s.Close()
			b, o := w.offer("")
			if err := os.WriteFile(filepath.Join(dir, "offer.json"), b, 0o600); err != nil {
				t.Fatal(err)
			}

			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
			cmd.Env = append(os.Environ(), "HANDOFF_CRASH_DIR="+dir, "HANDOFF_CRASH_PHASE="+phase)
			out, _ := cmd.StdoutPipe()
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"claimed": "claimed", "before": "working", "after": "committed"}[phase]
			sc := bufio.NewScanner(out)
			seen := false
			for sc.Scan() {
				if strings.TrimSpace(sc.Text()) == want {
					seen = true
					break
				}
			}
			if !seen {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child never reached %q: %s", want, stderr.String())
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()

			// Restart: recover first, as a delegate does at start-up.
			d, s2 := crashDelegate(t, dir)
			defer s2.Close()
			wantFlagged := map[string]int{"claimed": 1, "before": 1, "after": 0}[phase]
			for run := range 2 {
				n, err := d.Recover(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if run == 1 {
					wantFlagged = 0 // no duplicate flag
				}
				if n != wantFlagged {
					t.Fatalf("Recover run %d flagged %d hops; want %d", run+1, n, wantFlagged)
				}
			}
			flags, err := d.Flags(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			if phase != "after" && (len(flags) != 1 || flags[0].Kind != store.FlagUnknownOutcome || flags[0].Hop != o.Hop) {
				t.Fatalf("flags after Recover: %+v; want one unknown-outcome flag for hop %s", flags, o.Hop)
			}
			if phase == "after" && len(flags) != 0 {
				t.Fatalf("flags after Recover of a finished hop: %+v", flags)
			}
			a, err := d.Receive(ctx, b, "ctx", "planner")
			if err != nil || a.Take || a.Outcome != handoff.Retransmission {
				t.Fatalf("after the crash: %+v %v", a, err)
			}
			effects := count(t, s2.DB())
			switch phase {
			case "claimed", "before":
				accepted, err := os.ReadFile(filepath.Join(dir, "accepted.status"))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a.Status.Octets, accepted) {
					t.Fatal("the retransmission did not get the identical accepted octets")
				}
				if effects != 0 {
					t.Fatalf("the uncommitted effect is there: %d rows", effects)
				}
				// The store finished its recovery and the effect's row is
				// absent: the work did not take effect, and may now be done,
				// once.
				if _, err := d.RecordOutcome(ctx, o.Iss, o.Hop, effectOnly(func(tx *sql.Tx) (delegate.Outcome, error) {
					_, err := tx.Exec(`INSERT INTO effects (hop) VALUES (?)`, o.Hop)
					return delegate.Outcome{State: store.Completed}, err
				})); err != nil {
					t.Fatal(err)
				}
			case "after":
				completed, err := os.ReadFile(filepath.Join(dir, "completed.status"))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a.Status.Octets, completed) {
					t.Fatal("the retransmission did not get the identical completed octets")
				}
				if effects != 1 {
					t.Fatalf("the committed effect is lost: %d rows", effects)
				}
				if _, err := d.RecordOutcome(ctx, o.Iss, o.Hop, func(context.Context) (delegate.Effect, error) {
					t.Fatal("work done twice")
					return nil, nil
				}); err == nil {
					t.Fatal("a second outcome was recorded")
				}
			}
			if n := count(t, s2.DB()); n != 1 {
				t.Fatalf("effects: %d, want exactly 1", n)
			}
		})
	}
}

func writeCrashFiles(t *testing.T, w *world, dir string) {
	t.Helper()
	// The coder's key is regenerated so the child can load it.
	k, err := trust.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	jwk, err := trust.MarshalPrivateJWK(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "coder.jwk"), jwk, 0o600); err != nil {
		t.Fatal(err)
	}
	w.signers["coder"], _ = handoff.NewSigner(k)
	keys := trust.New()
	for name, s := range w.signers {
		tk, _ := trust.NewKey(s.Public())
		keys.Add(name, tk)
	}
	w.keys = keys
	tb, err := keys.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "trust.json"), tb, 0o600); err != nil {
		t.Fatal(err)
	}
}
