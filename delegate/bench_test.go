package delegate_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/postgres"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/trust"
)

// The durable-accept benchmarks: full receiving checks of a fresh JWS
// offer with its durable hop record (durable), beside the raw single-row
// insert-if-absent of the same database at the same durability setting
// (raw: SQLite WAL synchronous=FULL; PostgreSQL fsync and
// synchronous_commit on) and the public-key work every accept costs
// (floor: cryptoFloor), with 1 and 16 concurrent senders.
// scripts/bench-durable.sh prints them. The targets: with one sender, what
// a durable accept costs beyond the raw insert plus the floor is at most a
// quarter of the floor (beyond <= 0.25); with 16, a durable accept takes
// no longer than a raw insert (ratio <= 1.0: concurrent claims share a
// commit).
//
// The three kinds alternate in short phases (8 operations per sender)
// within one process, on one database, the kind going first rotating, so
// that the fsync latency of a shared machine, which drifts by 2x and more
// over seconds, hits all alike. Between phases the senders drain and start
// again, which costs every kind the same.

// offerPool pre-signs distinct offers (signing is the delegator's cost,
// not the delegate's) for the benchmark to take from.
type offerPool struct {
	offers [][]byte
	next   atomic.Int64
}

func newOfferPool(b *testing.B, w *world, n int) *offerPool {
	p := &offerPool{offers: make([][]byte, n)}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < n; i += 4 {
				p.offers[i], _ = w.offer("")
			}
		})
	}
	wg.Wait()
	return p
}

func (p *offerPool) take() []byte {
	i := p.next.Add(1) - 1
	return p.offers[int(i)%len(p.offers)]
}

// recordSize is the width of a real hop record's variable part but the
// hop: the offer and "accepted" status octets, iss and the digest.
func recordSize(b *testing.B) int {
	w := newWorld(b)
	d := w.delegate(w.freshStore(), nil)
	offer, _ := w.offer("")
	a, err := d.Receive(context.Background(), offer, "ctx", "planner")
	if err != nil || a.Record == nil {
		b.Fatalf("record size: %v", err)
	}
	r := a.Record
	return len(r.Offer) + len(r.Status) + len(r.Digest.Val) + len(r.Digest.Alg) + len(r.Iss)
}

var senderCounts = []int{1, 16}

// cryptoFloor is the public-key work every accepted offer costs whatever
// the implementation: one ES256 verification of the offer (SHA-256 of its
// signing input, crypto/ecdsa.VerifyASN1) and one ES256 signature of the
// "accepted" status (crypto/ecdsa.SignASN1). With one sender nothing
// overlaps it (each offer waits for the last answer, and on this machine a
// second goroutine does not shorten a commit: measured, signing during an
// insert took as long as signing after it), so a durable accept cannot take
// less than this plus the raw insert.
func cryptoFloor(b *testing.B, w *world) func() error {
	msg, _ := w.offer("")
	h, err := handoff.ParseHandoff(msg, handoff.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	input := h.Offer.Octets[:bytes.LastIndexByte(h.Offer.Octets, '.')]
	key, err := trust.GenerateKey()
	if err != nil {
		b.Fatal(err)
	}
	d := sha256.Sum256(input)
	sig, err := ecdsa.SignASN1(rand.Reader, key, d[:])
	if err != nil {
		b.Fatal(err)
	}
	status := make([]byte, 300) // about a JWS status's signing input
	return func() error {
		d := sha256.Sum256(input)
		if !ecdsa.VerifyASN1(&key.PublicKey, d[:], sig) {
			return errors.New("verify failed")
		}
		ds := sha256.Sum256(status)
		_, err := ecdsa.SignASN1(rand.Reader, key, ds[:])
		return err
	}
}

// BenchmarkCryptoFloor is cryptoFloor alone.
func BenchmarkCryptoFloor(b *testing.B) {
	op := cryptoFloor(b, newWorld(b))
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
}

func openSQLite(b *testing.B) *sqlite.Store {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "hops.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func openPostgres(b *testing.B) *postgres.Store {
	if os.Getenv("HANDOFF_TEST_POSTGRES") == "" {
		b.Skip("HANDOFF_TEST_POSTGRES is not set (scripts/bench-durable.sh starts a throwaway PostgreSQL)")
	}
	s, err := postgres.Open(context.Background(), postgresTarget(b))
	if err != nil {
		b.Fatal(err)
	}
	s.DB().SetMaxIdleConns(32)
	b.Cleanup(func() { s.Close() })
	return s
}

// benchDurable runs b.N operations of each kind (durable, raw, floor) in
// alternating phases and reports each one's time per operation and
// their relation: beyond = (durable - raw - floor) / floor, and ratio =
// durable / raw (a raw rate over a durable rate).
func benchDurable(b *testing.B, s interface {
	store.Store
	DB() *sql.DB
}, rawQ string, n int) {
	if _, err := s.DB().Exec(`CREATE TABLE IF NOT EXISTS raw (k TEXT PRIMARY KEY, v BYTEA NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	w := newWorld(b)
	w.now = time.Now()
	s.Forget(context.Background(), w.now.Add(-time.Minute))
	d := w.delegate(s, nil)
	pool := newOfferPool(b, w, max(b.N, 1))
	// A row as wide as a real hop record: the key (about 21 octets) stands
	// for the hop (22), the value is as long as the rest of the record.
	val := make([]byte, recordSize(b))
	prefix := fmt.Sprint(time.Now().UnixNano())
	var seq atomic.Int64
	durable := func() error {
		a, err := d.Receive(context.Background(), pool.take(), "ctx", "planner")
		if err != nil {
			return err
		}
		if !a.Take {
			return fmt.Errorf("offer not taken: %s %s", a.Outcome, a.Reason)
		}
		return nil
	}
	raw := func() error {
		_, err := s.DB().Exec(rawQ, fmt.Sprintf("%s-%d", prefix, seq.Add(1)), val)
		return err
	}
	kinds := []func() error{durable, raw, cryptoFloor(b, w)}
	var failed atomic.Value
	phase := func(k int, op func() error) time.Duration {
		var left atomic.Int64
		left.Store(int64(k))
		var wg sync.WaitGroup
		start := time.Now()
		for range n {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					if err := op(); err != nil {
						failed.Store(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	var took [3]time.Duration
	per := 8 * n
	runtime.GC() // the set-up's garbage (pre-signed offers) is not the operation's
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; i++ {
		k := min(per, b.N-done)
		for j := range kinds {
			x := (i + j) % len(kinds)
			took[x] += phase(k, kinds[x])
		}
		done += k
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	us := func(t time.Duration) float64 { return t.Seconds() * 1e6 / float64(b.N) }
	b.ReportMetric(us(took[0]), "durable-us")
	b.ReportMetric(us(took[1]), "raw-us")
	b.ReportMetric(us(took[2]), "floor-us")
	b.ReportMetric((took[0]-took[1]-took[2]).Seconds()/took[2].Seconds(), "beyond")
	b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "ratio")
}

func BenchmarkDurableSQLite(b *testing.B) {
	for _, n := range senderCounts {
		b.Run(fmt.Sprintf("senders=%d", n), func(b *testing.B) {
			benchDurable(b, openSQLite(b), `INSERT INTO raw (k, v) VALUES (?, ?) ON CONFLICT (k) DO NOTHING`, n)
		})
	}
}

func BenchmarkDurablePostgres(b *testing.B) {
	for _, n := range senderCounts {
		b.Run(fmt.Sprintf("senders=%d", n), func(b *testing.B) {
			benchDurable(b, openPostgres(b), `INSERT INTO raw (k, v) VALUES ($1, $2) ON CONFLICT (k) DO NOTHING`, n)
		})
	}
}
