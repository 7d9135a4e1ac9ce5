package postgres_test

import (
	"database/sql"
	"testing"

	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// BenchmarkList: an operator's listing pages on a store of
// storetest.ListBenchRows records (a million in scripts/bench-list.sh),
// analyzed once filled, as autovacuum would.
func BenchmarkList(b *testing.B) {
	rows := storetest.ListBenchRows(b)
	s := fresh(b)
	fillList(b, s.DB(), rows)
	storetest.BenchList(b, s, rows)
}

// fillList writes storetest.BenchList's records, 100,000 a statement.
func fillList(b *testing.B, db *sql.DB, rows int) {
	base := storetest.ListBenchBase.UnixNano()
	for lo := 0; lo < rows; lo += 100_000 {
		hi := min(lo+100_000, rows) - 1
		if _, err := db.ExecContext(b.Context(), `INSERT INTO hops (iss, hop, digest_alg, digest, offer, offer_form, state, status,
  status_form, canceled, equivocated, received, keep_until, decided)
SELECT CASE WHEN x % 500 = 37 THEN $3 ELSE 'https://agent-' || (x % 20) || '.example' END,
  lpad(to_hex(x), 16, '0'), 'sha-256', decode(md5(x::text), 'hex'), convert_to(repeat(md5(x::text), 12), 'UTF8'), 1,
  CASE WHEN x % 1000 < 10 THEN 'accepted' WHEN x % 1000 < 30 THEN 'rejected' WHEN x % 1000 < 50 THEN 'failed'
    WHEN x % 1000 = 50 THEN 'received' ELSE 'completed' END,
  convert_to(repeat(md5(x::text), 6), 'UTF8'), 1, 0, 0, $4 + x * 1000000, $4 + x * 1000000 + 300000000000, 0
FROM generate_series($1::bigint, $2::bigint) AS x`, lo, hi, storetest.ListBenchRare, base); err != nil {
			b.Fatalf("filling the store: %v", err)
		}
	}
	if _, err := db.ExecContext(b.Context(), `INSERT INTO flags (kind, iss, hop, detail, created)
SELECT $1, iss, hop, 'bench', received FROM hops WHERE ((received - $2) / 1000000) % 5000 = 3`, store.FlagUnknownOutcome, base); err != nil {
		b.Fatalf("filling the flags: %v", err)
	}
	if _, err := db.ExecContext(b.Context(), `ANALYZE hops; ANALYZE flags`); err != nil {
		b.Fatalf("analyze: %v", err)
	}
}
