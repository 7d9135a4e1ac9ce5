package sqlite_test

import (
	"context"
	"testing"

	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// BenchmarkList: an operator's listing pages on a store of
// storetest.ListBenchRows records (a million in scripts/bench-list.sh).
// The store is not analyzed, as the store never analyzes: the pages come
// from the indexes the planner finds without statistics.
func BenchmarkList(b *testing.B) {
	s := fresh(b)
	base := storetest.ListBenchBase.UnixNano()
	storetest.BenchList(b, s, func(ctx context.Context, lo, hi int) error {
		_, err := s.DB().ExecContext(ctx, `WITH RECURSIVE n(x) AS (SELECT ? UNION ALL SELECT x + 1 FROM n WHERE x < ?)
INSERT INTO hops (iss, hop, digest_alg, digest, offer, offer_form, state, status, status_form, canceled, equivocated, received, keep_until, decided)
SELECT CASE WHEN x % 500 = 37 THEN ? ELSE 'https://agent-' || (x % 20) || '.example' END,
  printf('%016x', x), 'sha-256', randomblob(32), randomblob(400), 1,
  CASE WHEN x % 1000 < 10 THEN 'accepted' WHEN x % 1000 < 30 THEN 'rejected' WHEN x % 1000 < 50 THEN 'failed'
    WHEN x % 1000 = 50 THEN 'received' ELSE 'completed' END,
  randomblob(200), 1, 0, 0, ? + x * 1000000, ? + x * 1000000 + 300000000000, 0
FROM n`, lo, hi, storetest.ListBenchRare, base, base)
		return err
	})
}

// BenchmarkListIssued: the console's pages of hops issued onward on a
// store of storetest.ListBenchRows issued hops, not analyzed.
func BenchmarkListIssued(b *testing.B) {
	s := fresh(b)
	base := storetest.ListBenchBase.UnixNano()
	storetest.BenchListIssued(b, s, func(ctx context.Context, lo, hi int) error {
		_, err := s.DB().ExecContext(ctx, `WITH RECURSIVE n(x) AS (SELECT ? UNION ALL SELECT x + 1 FROM n WHERE x < ?)
INSERT INTO issued (hop, aud, work, offer, offer_form, digest_alg, digest, prev_alg, prev, exp, view, resolved, status, status_form, attempts, next_ask, created)
SELECT printf('%016x', x), CASE WHEN x % 500 = 7 THEN ? ELSE 'https://downstream-' || (x % 8) || '.example' END,
  'work-' || x, randomblob(400), 1, 'sha-256', randomblob(32), 'sha-256', randomblob(32), ? + x * 1000000 + 300000000000,
  CASE WHEN x % 1000 < 5 THEN 'offered' WHEN x % 1000 < 15 THEN 'accepted' WHEN x % 1000 < 20 THEN 'offered'
    WHEN x % 1000 < 40 THEN 'rejected' WHEN x % 1000 < 60 THEN 'failed' WHEN x % 1000 < 63 THEN 'canceled' ELSE 'completed' END,
  CASE WHEN x % 1000 < 15 OR x % 1000 = 62 THEN 0 ELSE 1 END,
  randomblob(200), 1, 0, 0, ? + x * 1000000
FROM n`, lo, hi, storetest.ListBenchRareAud, base, base)
		return err
	})
}
