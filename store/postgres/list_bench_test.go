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

// BenchmarkListIssued: the console's pages of hops issued onward on a
// store of storetest.ListBenchRows issued hops, analyzed as it is filled.
func BenchmarkListIssued(b *testing.B) {
	s := fresh(b)
	base := storetest.ListBenchBase.UnixNano()
	storetest.BenchListIssued(b, s, func(ctx context.Context, lo, hi int) error {
		_, err := s.DB().ExecContext(ctx, `INSERT INTO issued (hop, aud, work, offer, offer_form, digest_alg, digest, prev_alg, prev,
  exp, view, resolved, status, status_form, attempts, next_ask, created)
SELECT lpad(to_hex(x), 16, '0'), CASE WHEN x % 500 = 7 THEN $3 ELSE 'https://downstream-' || (x % 8) || '.example' END,
  'work-' || x, convert_to(repeat(md5(x::text), 12), 'UTF8'), 1, 'sha-256', decode(md5(x::text), 'hex'), 'sha-256',
  decode(md5((x + 1)::text), 'hex'), $4 + x * 1000000 + 300000000000,
  CASE WHEN x % 1000 < 5 THEN 'offered' WHEN x % 1000 < 15 THEN 'accepted' WHEN x % 1000 < 20 THEN 'offered'
    WHEN x % 1000 < 40 THEN 'rejected' WHEN x % 1000 < 60 THEN 'failed' WHEN x % 1000 < 63 THEN 'canceled' ELSE 'completed' END,
  CASE WHEN x % 1000 < 15 OR x % 1000 = 62 THEN 0 ELSE 1 END,
  convert_to(repeat(md5(x::text), 6), 'UTF8'), 1, 0, 0, $4 + x * 1000000
FROM generate_series($1::bigint, $2::bigint) AS x`, lo, hi, storetest.ListBenchRareAud, base)
		if err == nil {
			_, err = s.DB().ExecContext(ctx, `ANALYZE issued`)
		}
		return err
	})
}
