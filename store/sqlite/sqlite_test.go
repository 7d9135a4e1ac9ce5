package sqlite_test

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// open opens the store in path, closing it when t ends.
func open(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func fresh(t testing.TB) *sqlite.Store {
	return open(t, filepath.Join(t.TempDir(), "hops.db"))
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return fresh(t) })
}

func TestOutcome(t *testing.T) {
	storetest.RunOutcome(t, func(t *testing.T) store.SQLStore { return fresh(t) })
}

func TestTracker(t *testing.T) {
	storetest.RunTracker(t, func(t *testing.T) store.Tracker { return fresh(t) })
}

// Records, flags and Since live in the file: a store reopened on it (a
// restarted process) has them all.
func TestReopenKeepsRecordsAndSince(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "hops.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	since, err := s.Since(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := storetest.NewRecord("a", store.Accepted, 0)
	b := storetest.NewRecord("b", store.Received, 2) // its offer came with a chain of two
	c := storetest.NewRecord("c", store.Received, 0)
	c.Chain, c.ChainForms = [][]byte{}, []handoff.Form{} // an empty chain stays empty
	for _, r := range []*store.Record{a, b, c} {
		if _, ins, err := s.Claim(ctx, r); err != nil || !ins {
			t.Fatalf("Claim(%s) = %v, %v", r.Hop, ins, err)
		}
	}
	done := storetest.Base.Add(time.Minute)
	if err := s.Transition(ctx, store.Move{Iss: storetest.Iss, Hop: "a", From: store.Accepted, To: store.Completed, Status: storetest.Status("a/done"), Form: handoff.FormCOSE, Now: done}); err != nil {
		t.Fatal(err)
	}
	a.Earlier, a.EarlierForm = a.Status, a.StatusForm
	a.State, a.Status, a.StatusForm, a.Decided = store.Completed, storetest.Status("a/done"), handoff.FormCOSE, done
	if err := s.MarkCanceled(ctx, storetest.Iss, "b"); err != nil {
		t.Fatal(err)
	}
	b.Canceled = true
	id, err := s.Raise(ctx, store.Flag{Kind: store.FlagUnknownOutcome, Iss: storetest.Iss, Hop: "b", Detail: "d", Created: storetest.Base})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path)
	for _, want := range []*store.Record{a, b, c} {
		got, err := s.Get(ctx, want.Iss, want.Hop)
		if err != nil {
			t.Fatalf("Get(%s) after reopening: %v", want.Hop, err)
		}
		if d := storetest.DiffRecord(got, want); d != nil {
			t.Errorf("Get(%s) after reopening differs:\n\t%s", want.Hop, strings.Join(d, "\n\t"))
		}
	}
	if got, err := s.Since(ctx); err != nil || !got.Equal(since) {
		t.Errorf("Since after reopening = %v, %v; want %v", got, err, since)
	}
	if fl, err := s.Flags(ctx, false); err != nil || len(fl) != 1 || fl[0].ID != id {
		t.Errorf("Flags after reopening = %+v, %v; want flag %d", fl, err, id)
	}

	// A Forget survives a reopening too.
	forgot := storetest.Base.Add(3 * time.Hour)
	if err := s.Forget(ctx, forgot); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	if got, err := s.Since(ctx); err != nil || !got.Equal(forgot) {
		t.Errorf("Since after Forget and reopening = %v, %v; want %v", got, err, forgot)
	}
	if _, err := s.Get(ctx, storetest.Iss, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get after Forget and reopening = %v; want ErrNotFound", err)
	}
}

// Two stores on one file (two processes sharing it) racing to claim one
// hop: exactly one claim inserts, and every caller gets the winner's
// record; racing transitions: exactly one wins.
func TestTwoStoresRaceClaims(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hops.db")
	storetest.RunTwoHandles(t, func(t *testing.T) store.Store { return open(t, path) })
}

// Two processes on one file racing to claim the same hops: for each hop
// exactly one claim, in one of the processes, inserts, and every claim in
// both gets that record. The processes are this test binary run again
// (claimerEnv names the file).
func TestTwoProcessesRaceClaims(t *testing.T) {
	if path := os.Getenv(claimerEnv); path != "" {
		runClaimer(t, path)
		return
	}
	path := filepath.Join(t.TempDir(), "hops.db")
	open(t, path) // create the schema first; opening at once is TestConcurrentOpenMigratesOnce
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Scanner
		log   strings.Builder // its other output, for a failure
	}
	var children []*child
	for p := range 2 {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestTwoProcessesRaceClaims$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), claimerEnv+"="+path, fmt.Sprintf("HANDOFF_SQLITE_CLAIMER_ID=%d", p))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := &child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
		children = append(children, c)
		// Wait until it has opened the store.
		for c.out.Scan() && c.out.Text() != "READY" {
			fmt.Fprintln(&c.log, c.out.Text())
		}
	}
	for _, c := range children {
		c.stdin.Write([]byte("go\n"))
		c.stdin.Close()
	}
	// Per hop: the digests every claim got, and how many inserted.
	got := map[string]map[string]bool{}
	inserted := map[string]int{}
	for _, c := range children {
		for c.out.Scan() {
			var hop, digest string
			var ins bool
			if _, err := fmt.Sscanf(c.out.Text(), "CLAIM %s %t %s", &hop, &ins, &digest); err != nil {
				fmt.Fprintln(&c.log, c.out.Text())
				continue
			}
			if got[hop] == nil {
				got[hop] = map[string]bool{}
			}
			got[hop][digest] = true
			if ins {
				inserted[hop]++
			}
		}
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("claimer process: %v\n%s", err, c.log.String())
		}
	}
	s := open(t, path)
	if len(got) != claimerHops {
		t.Fatalf("the claimers reported %d hops; want %d", len(got), claimerHops)
	}
	for hop, digests := range got {
		if inserted[hop] != 1 {
			t.Errorf("hop %s: %d claims inserted across the two processes; want 1", hop, inserted[hop])
		}
		r, err := s.Get(t.Context(), storetest.Iss, hop)
		if err != nil {
			t.Fatalf("Get(%s): %v", hop, err)
		}
		stored := hex.EncodeToString(r.Digest.Val)
		if len(digests) != 1 || !digests[stored] {
			t.Errorf("hop %s: the claims got digests %v; want only the stored %s", hop, digests, stored)
		}
	}
}

const (
	claimerEnv  = "HANDOFF_SQLITE_CLAIMER"
	claimerHops = 4
)

// runClaimer is one process of TestTwoProcessesRaceClaims: it opens the
// store, says READY, waits for a line on stdin, then claims each hop from
// 32 goroutines at once with offers of its own, printing what each got.
func runClaimer(t *testing.T, path string) {
	s := open(t, path)
	id, _ := strconv.Atoi(os.Getenv("HANDOFF_SQLITE_CLAIMER_ID"))
	fmt.Println("READY")
	bufio.NewReader(os.Stdin).ReadString('\n')
	var mu sync.Mutex
	var wg sync.WaitGroup
	for h := range claimerHops {
		hop := fmt.Sprintf("proc-%d", h)
		for i := range 32 {
			r := storetest.NewRecord(hop, store.Received, 1000*id+i)
			wg.Go(func() {
				got, ins, err := s.Claim(t.Context(), r)
				if err != nil {
					t.Errorf("Claim: %v", err)
					return
				}
				mu.Lock()
				fmt.Printf("CLAIM %s %t %s\n", hop, ins, hex.EncodeToString(got.Digest.Val))
				mu.Unlock()
			})
		}
	}
	wg.Wait()
}

func versions(t *testing.T, s *sqlite.Store) []int {
	t.Helper()
	rows, err := s.DB().QueryContext(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatalf("schema_migrations: %v", err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return vs
}

func checkVersions(t *testing.T, vs []int) {
	t.Helper()
	if len(vs) == 0 {
		t.Fatalf("schema_migrations is empty")
	}
	for i, v := range vs {
		if v != i+1 {
			t.Fatalf("schema_migrations = %v; want 1, 2, ... each once", vs)
		}
	}
}

// The schema version is kept in schema_migrations, one row per migration,
// each applied once however often the file is opened; a file whose schema
// is newer than the program is refused.
func TestMigrationVersionTable(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "hops.db")
	s := open(t, path)
	vs := versions(t, s)
	checkVersions(t, vs)
	s.Close()
	s = open(t, path)
	if again := versions(t, s); len(again) != len(vs) {
		t.Errorf("schema_migrations after reopening = %v; was %v", again, vs)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO schema_migrations (version) VALUES (?)`, len(vs)+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s2, err := sqlite.Open(ctx, path); err == nil {
		s2.Close()
		t.Errorf("Open of a file whose schema is version %d (newer than the program's) succeeded", len(vs)+1)
	}
}

// Stores opened at once on a new file (processes starting together) all
// open, and the migrations run once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hops.db")
	const n = 8
	stores := make([]*sqlite.Store, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = sqlite.Open(t.Context(), path)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Open %d: %v", i, errs[i])
			continue
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	for i := range n {
		if errs[i] == nil {
			checkVersions(t, versions(t, stores[i]))
			break
		}
	}
}

// pragmas reads the settings Open promises (package doc, DSN): WAL,
// synchronous=FULL, a busy timeout.
func pragmas(t *testing.T, s *sqlite.Store) (journal string, synchronous, busy int) {
	t.Helper()
	ctx := t.Context()
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&journal); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&synchronous); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil {
		t.Fatal(err)
	}
	return journal, synchronous, busy
}

// Open takes its argument as a file path: the store lives in exactly that
// file, whatever characters the name has, with the durability settings
// (WAL, synchronous=FULL) and the busy timeout that other processes
// sharing the file rely on.
func TestOpenPathIsLiteral(t *testing.T) {
	// The subtests are numbered, not named after the file: t.TempDir's
	// path holds the test's name.
	for i, name := range []string{"hops.db", "with space.db", "with#hash.db", "with?question.db", "with%20escape.db", "with%percent.db"} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, filepath.Join(dir, name))
			if _, _, err := s.Claim(t.Context(), storetest.NewRecord("h", store.Received, 0)); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				ents, _ := os.ReadDir(dir)
				var files []string
				for _, e := range ents {
					files = append(files, e.Name())
				}
				t.Errorf("Open(%q) did not create that file; the directory holds %q", name, files)
			}
			journal, synchronous, busy := pragmas(t, s)
			if journal != "wal" || synchronous != 2 || busy <= 0 {
				t.Errorf("Open(%q): journal_mode %s, synchronous %d, busy_timeout %d; want wal, 2 (FULL), > 0", name, journal, synchronous, busy)
			}
		})
	}
}

// TestOpenNotADatabase: a file that is not SQLite is refused with one
// error that names the file and says what is wrong, "store:" once.
func TestOpenNotADatabase(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hops.db")
	if err := os.WriteFile(p, []byte("not a database, just text that is long enough to have a header\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := sqlite.Open(t.Context(), p)
	if err == nil {
		t.Fatal("a text file opened as a store")
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "store: sqlite "+p+": migrate: ") || strings.Count(msg, "store:") != 1 || !strings.Contains(msg, "not a database") {
		t.Errorf("error %q: want one \"store: sqlite %s: migrate: ...\" saying it is not a database", msg, p)
	}
}
