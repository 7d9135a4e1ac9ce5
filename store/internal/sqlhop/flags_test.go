package sqlhop_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/internal/sqlhop"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// TestListFlagsReadsItsIndex: on SQLite, which never analyzes here, every
// shape of an operator's page of flags reads an index in the listing's
// order, or a few hops' entries: the open flags from flags_open_id (never
// reading past the resolved ones), every flag from the primary key, some
// hops' from flags_hop; none sorts a listing of every hop's flags (the
// primary key's scan, backwards from the cursor, is the listing's order).
func TestListFlagsReadsItsIndex(t *testing.T) {
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hops.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	one := []store.HopKey{{Iss: storetest.Iss, Hop: "h1"}}
	two := append(one, store.HopKey{Iss: storetest.Iss, Hop: "h2"})
	for _, c := range []struct {
		q    store.FlagQuery
		want string // the index every step reads ("rowid": the primary key)
	}{
		{store.FlagQuery{Open: true}, "flags_open_id"},
		{store.FlagQuery{Open: true, Before: 1000}, "flags_open_id"},
		{store.FlagQuery{}, "rowid"},
		{store.FlagQuery{Before: 1000}, "rowid"},
		{store.FlagQuery{Hops: one}, "flags_hop"},
		{store.FlagQuery{Hops: one, Open: true}, "flags_"},
		{store.FlagQuery{Hops: two, Before: 7}, "flags_hop"},
	} {
		c.q.Limit = 50
		query, args := sqlhop.FlagList(s, c.q)
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
		for _, step := range plan {
			switch {
			case c.want == "rowid" && (step == "SCAN flags" || strings.Contains(step, "USING INTEGER PRIMARY KEY")):
			case strings.HasPrefix(step, "SCAN") || strings.HasPrefix(step, "SEARCH"):
				if !strings.Contains(step, "USING INDEX "+c.want) {
					t.Errorf("%+v: the plan reads %q, not %s", c.q, step, c.want)
				}
			case strings.Contains(step, "TEMP B-TREE") && len(c.q.Hops) == 0:
				t.Errorf("%+v: the plan sorts the listing: %q", c.q, step)
			}
		}
		t.Logf("%+v:\n\t%s", c.q, strings.Join(plan, "\n\t"))
	}
}
