package sqlhop_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/internal/sqlhop"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// TestListIssuedReadsItsIndex: on SQLite, which never analyzes here,
// every shape of the issued listing's page reads its index in the
// listing's order (issued_listed, or issued_listed_aud for a delegate):
// each range is searched in the index (no table scan, no sort of a
// range), and only the pages of several ranges are sorted again, for
// their merge.
func TestListIssuedReadsItsIndex(t *testing.T) {
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hops.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	no := false
	at := storetest.Base
	for _, q := range []store.IssuedQuery{
		{},
		{View: store.ViewAccepted},
		{Resolved: &no},
		{View: store.Offered, Resolved: &no},
		{Aud: storetest.Aud},
		{View: store.ViewFailed, Resolved: &no, Aud: storetest.Aud, From: at, To: at.Add(time.Hour)},
		{After: &store.IssuedCursor{Created: at, Aud: storetest.Aud, Hop: "h"}},
		{View: store.ViewComplete, Resolved: &no, After: &store.IssuedCursor{Created: at, Aud: storetest.Aud, Hop: "h"}},
	} {
		q.Limit = 50
		index := "issued_listed"
		if q.Aud != "" {
			index = "issued_listed_aud"
		}
		query, args := sqlhop.IssuedList(s, q)
		rows, err := s.DB().QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		// Each range: a SEARCH of the index, in its order; several
		// ranges: each range's page sorted again (at most a page of rows)
		// for the merge.
		ranges, sorts := 0, 0
		for _, step := range plan {
			switch {
			case strings.HasPrefix(step, "SEARCH i USING INDEX "+index+" ("):
				ranges++
			case strings.HasPrefix(step, "SEARCH"), strings.HasPrefix(step, "SCAN") && !strings.HasPrefix(step, "SCAN s"):
				t.Errorf("%+v: the plan reads %q", q, step)
			case step == "USE TEMP B-TREE FOR ORDER BY":
				sorts++
			case strings.Contains(step, "TEMP B-TREE"):
				t.Errorf("%+v: the plan sorts: %q", q, step)
			}
		}
		want := 1
		if q.View == "" {
			want *= len(store.Views())
		}
		if q.Resolved == nil {
			want *= 2
		}
		if wantSorts := map[bool]int{true: want, false: 0}[want > 1]; ranges != want || sorts != wantSorts {
			t.Errorf("%+v: %d ranges of %s read (want %d), %d sorts (want %d):\n\t%s", q, ranges, index, want, sorts, wantSorts, strings.Join(plan, "\n\t"))
		}
	}
}
