package store

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// An operator's listing of hop records (Store.List): newest first, by
// state, delegator, open flag and time, a page at a time. The SQL stores
// answer each page from indexes (hops by state in the listing's order,
// the primary key for a delegator with few hops, open flags by hop), so a
// page costs about the same with a thousand records or a million.

// HopQuery selects the records of a listing. The zero values select
// everything: every state, every delegator, flagged or not, any time.
type HopQuery struct {
	State   State     // only hops in this state ("": every state)
	Iss     string    // only this delegator's hops ("": every delegator)
	Flagged bool      // only hops with an open flag (Flags(ctx, false))
	From    time.Time // only hops received at or after From (zero: no bound)
	To      time.Time // only hops received before To (zero: no bound)
	// After is where the last page ended (that page's last record's
	// Cursor); nil starts with the newest hop.
	After *HopCursor
	Limit int // at most this many records, 1 to MaxListLimit
}

// MaxListLimit bounds one page of a listing.
const MaxListLimit = 1000

// HopCursor is a record's place in a listing: newest Received first, and
// among hops received at the same instant, by Iss and then Hop in
// descending byte order.
type HopCursor struct {
	Received time.Time
	Iss, Hop string
}

// Cursor is r's place in a listing, for the next page's HopQuery.After.
func (r *Record) Cursor() *HopCursor {
	return &HopCursor{Received: r.Received, Iss: r.Iss, Hop: r.Hop}
}

// Before reports whether c lists before o.
func (c HopCursor) Before(o HopCursor) bool {
	if !c.Received.Equal(o.Received) {
		return c.Received.After(o.Received)
	}
	if c.Iss != o.Iss {
		return c.Iss > o.Iss
	}
	return c.Hop > o.Hop
}

// Check reports what is wrong with q, if anything.
func (q HopQuery) Check() error {
	var bad []string
	if q.State != "" && !q.State.Valid() {
		bad = append(bad, fmt.Sprintf("state %q is not a hop state", q.State))
	}
	bad = append(bad, pageProblems(q.Limit, q.From, q.To)...)
	if q.After != nil && !storable(q.After.Received) {
		bad = append(bad, "after: a cursor's received time must be a record's (the years 1678 to 2262)")
	}
	if len(bad) > 0 {
		return fmt.Errorf("store: list: %w", errors.New(strings.Join(bad, "; ")))
	}
	return nil
}

// pageProblems are what is wrong with a listing's limit and time window.
func pageProblems(limit int, from, to time.Time) []string {
	var bad []string
	if limit < 1 || limit > MaxListLimit {
		bad = append(bad, fmt.Sprintf("limit must be 1 to %d, not %d", MaxListLimit, limit))
	}
	if !from.IsZero() && !to.IsZero() && !from.Before(to) {
		bad = append(bad, "from must be before to")
	}
	// The SQL stores keep times as nanoseconds since 1970 in 64 bits.
	for _, t := range []struct {
		name string
		t    time.Time
	}{{"from", from}, {"to", to}} {
		if !t.t.IsZero() && !storable(t.t) {
			bad = append(bad, fmt.Sprintf("%s %s is outside the years 1678 to 2262 a store can compare", t.name, t.t.Format(time.RFC3339)))
		}
	}
	return bad
}

// storable reports whether t fits the SQL stores' 64-bit nanoseconds.
func storable(t time.Time) bool {
	return !t.Before(time.Unix(0, math.MinInt64)) && !t.After(time.Unix(0, math.MaxInt64))
}

// Matches reports whether q selects r (flagged: r's hop has an open
// flag), leaving aside After and Limit.
func (q HopQuery) Matches(r *Record, flagged bool) bool {
	return (q.State == "" || r.State == q.State) &&
		(q.Iss == "" || r.Iss == q.Iss) &&
		(!q.Flagged || flagged) &&
		(q.From.IsZero() || !r.Received.Before(q.From)) &&
		(q.To.IsZero() || r.Received.Before(q.To))
}

// States is every hop state, in the lifecycle's order.
func States() []State { return []State{Received, Accepted, Rejected, Completed, Failed} }
