package postgres_test

import (
	"context"
	"testing"

	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// BenchmarkList: an operator's listing pages on a store of
// storetest.ListBenchRows records (a million in scripts/bench-list.sh),
// analyzed as it is filled, as autovacuum would.
func BenchmarkList(b *testing.B) {
	s := fresh(b)
	base := storetest.ListBenchBase.UnixNano()
	storetest.BenchList(b, s, func(ctx context.Context, lo, hi int) error {
		_, err := s.DB().ExecContext(ctx, `INSERT INTO hops (iss, hop, digest_alg, digest, offer, offer_form, state, status,
  status_form, canceled, equivocated, received, keep_until, decided)
SELECT CASE WHEN x % 500 = 37 THEN $3 ELSE 'https://agent-' || (x % 20) || '.example' END,
  lpad(to_hex(x), 16, '0'), 'sha-256', decode(md5(x::text), 'hex'), convert_to(repeat(md5(x::text), 12), 'UTF8'), 1,
  CASE WHEN x % 1000 < 10 THEN 'accepted' WHEN x % 1000 < 30 THEN 'rejected' WHEN x % 1000 < 50 THEN 'failed'
    WHEN x % 1000 = 50 THEN 'received' ELSE 'completed' END,
  convert_to(repeat(md5(x::text), 6), 'UTF8'), 1, 0, 0, $4 + x * 1000000, $4 + x * 1000000 + 300000000000, 0
FROM generate_series($1::bigint, $2::bigint) AS x`, lo, hi, storetest.ListBenchRare, base)
		if err == nil {
			_, err = s.DB().ExecContext(ctx, `ANALYZE hops`)
		}
		return err
	})
}
