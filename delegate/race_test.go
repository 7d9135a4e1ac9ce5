package delegate_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/postgres"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/trust"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// raceOpen opens the shared store named by kind and target.
func raceOpen(t *testing.T, kind, target string) store.Store {
	t.Helper()
	var s store.Store
	var err error
	if kind == "postgres" {
		s, err = postgres.Open(context.Background(), target)
	} else {
		s, err = sqlite.Open(context.Background(), target)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tally counts the outcomes of n goroutines each receiving the offer files
// in turn (goroutine i sends offers[i % len(offers)]) at the same moment.
func tally(t *testing.T, d *delegate.Delegate, offers [][]byte, n int) map[string]int {
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			a, err := d.Receive(context.Background(), offers[i%len(offers)], "ctx", "planner")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				counts["error: "+err.Error()]++
				return
			}
			if a.Take {
				counts["take"]++
			}
			counts[string(a.Outcome)]++
		}()
	}
	close(start)
	wg.Wait()
	return counts
}

// TestRaceChild is the second process of TestRace.
func TestRaceChild(t *testing.T) {
	dir := os.Getenv("HANDOFF_RACE_DIR")
	if dir == "" {
		t.Skip("run by TestRace as a child process")
	}
	kind, target := os.Getenv("HANDOFF_RACE_KIND"), os.Getenv("HANDOFF_RACE_TARGET")
	s := raceOpen(t, kind, target)
	defer s.Close()
	d := raceDelegate(t, dir, s)
	var offers [][]byte
	for _, f := range strings.Split(os.Getenv("HANDOFF_RACE_OFFERS"), ",") {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		offers = append(offers, b)
	}
	// Wait for the parent's go signal so both processes fire together.
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := tally(t, d, offers, 32)
	fmt.Printf("RESULT take=%d accepted=%d retransmission=%d equivocation=%d other=%d\n",
		c["take"], c["accepted"], c["retransmission"], c["equivocation"], 32-c["accepted"]-c["retransmission"]-c["equivocation"])
}

func raceDelegate(t *testing.T, dir string, s store.Store) *delegate.Delegate {
	keys, err := trust.Load(filepath.Join(dir, "trust.json"))
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := os.ReadFile(filepath.Join(dir, "coder.jwk"))
	k, _, err := trust.ParsePrivateJWK(kb)
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := handoff.NewSigner(k)
	d, err := delegate.New(context.Background(), delegate.Config{Options: handoff.Options{Me: "coder", Keys: keys}, Store: s, Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// postgresTarget returns a fresh database on the test server, or skips
// (fails in CI) when there is none.
func postgresTarget(t testing.TB) string {
	dsn := os.Getenv("HANDOFF_TEST_POSTGRES")
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("HANDOFF_TEST_POSTGRES is not set: run the tests through scripts/test.sh, which starts PostgreSQL")
		}
		t.Skip("HANDOFF_TEST_POSTGRES is not set (scripts/test.sh starts a throwaway PostgreSQL)")
	}
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	name := fmt.Sprintf("race_%d", time.Now().UnixNano())
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a, err := sql.Open("pgx", dsn)
		if err == nil {
			a.Exec("DROP DATABASE " + name + " WITH (FORCE)")
			a.Close()
		}
	})
	return withDBName(dsn, name)
}

// withDBName replaces dbname in a key=value connection string or URL.
func withDBName(dsn, name string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		u.Path = "/" + name
		return u.String()
	}
	var parts []string
	for _, f := range strings.Fields(dsn) {
		if !strings.HasPrefix(f, "dbname=") {
			parts = append(parts, f)
		}
	}
	return strings.Join(append(parts, "dbname="+name), " ")
}

// "Freshness and Replay", "Forks, Concurrency, and Equivocation": 64
// goroutines in 2 processes sharing one store receive the same offer at
// once: exactly one takes it, the rest are retransmissions. Then two
// different offers for one (iss, hop): one is taken, the other detected as
// equivocation, and flagged.
func TestRace(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			var target string
			if kind == "postgres" {
				target = postgresTarget(t)
			} else {
				target = filepath.Join(t.TempDir(), "hops.db")
			}
			s := raceOpen(t, kind, target)
			defer s.Close()
			s.Forget(context.Background(), time.Now().Add(-time.Minute))

			w := newWorld(t)
			w.now = time.Now()
			dir := t.TempDir()
			writeCrashFiles(t, w, dir)
			d := raceDelegate(t, dir, s)

			same, _ := w.offer("")
			os.WriteFile(filepath.Join(dir, "same.json"), same, 0o600)
			_, o := w.offer("")
			a1, _ := w.offer(o.Hop)
			a2, _ := w.offer(o.Hop)
			os.WriteFile(filepath.Join(dir, "a1.json"), a1, 0o600)
			os.WriteFile(filepath.Join(dir, "a2.json"), a2, 0o600)

			run := func(files string, offers [][]byte) (map[string]int, string) {
				os.Remove(filepath.Join(dir, "go"))
				cmd := exec.Command(os.Args[0], "-test.run=^TestRaceChild$")
				cmd.Env = append(os.Environ(), "HANDOFF_RACE_DIR="+dir, "HANDOFF_RACE_KIND="+kind,
					"HANDOFF_RACE_TARGET="+target, "HANDOFF_RACE_OFFERS="+files)
				var out strings.Builder
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(300 * time.Millisecond) // let the child open the store
				os.WriteFile(filepath.Join(dir, "go"), nil, 0o600)
				c := tally(t, d, offers, 32)
				if err := cmd.Wait(); err != nil {
					t.Fatalf("child: %v\n%s", err, out.String())
				}
				return c, out.String()
			}
			parse := func(out string) map[string]int {
				m := map[string]int{}
				i := strings.Index(out, "RESULT ")
				if i < 0 {
					t.Fatalf("child said: %s", out)
				}
				line := strings.SplitN(out[i+len("RESULT "):], "\n", 2)[0]
				for _, f := range strings.Fields(line) {
					var k string
					var v int
					kv := strings.SplitN(f, "=", 2)
					k = kv[0]
					fmt.Sscan(kv[1], &v)
					m[k] = v
				}
				return m
			}

			c, out := run("same.json", [][]byte{same})
			cc := parse(out)
			if c["take"]+cc["take"] != 1 || c["retransmission"]+cc["retransmission"] != 63 || cc["other"] != 0 || len(c) > 3 {
				t.Fatalf("same offer: parent %v, child %v", c, cc)
			}

			c, out = run("a1.json,a2.json", [][]byte{a1, a2})
			cc = parse(out)
			if c["take"]+cc["take"] != 1 || c["equivocation"]+cc["equivocation"] != 32 ||
				c["retransmission"]+cc["retransmission"]+c["accepted"]+cc["accepted"] != 32 || cc["other"] != 0 {
				t.Fatalf("equivocating offers: parent %v, child %v", c, cc)
			}
			// 32 deliveries of one conflicting offer, from two processes:
			// one open flag (issue 13: one per conflicting content).
			flags, err := d.Flags(context.Background(), false)
			if err != nil || len(flags) != 1 {
				t.Fatalf("flags: %d %v; want 1", len(flags), err)
			}
		})
	}
}
