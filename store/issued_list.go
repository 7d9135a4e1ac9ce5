package store

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// An operator's listing of the hops a delegator issued (Tracker.ListIssued):
// newest first, by view, delegate, resolution and time, a page at a time,
// as List is for the hops received. The SQL stores answer each page from
// one index in the listing's order (issued hops by view and resolution),
// so a page costs about the same with a thousand hops or a million.

// IssuedQuery selects the issued hops of a listing. The zero values
// select everything: every view, every delegate, resolved or not, any
// time.
type IssuedQuery struct {
	View     View      // only hops in this view ("": every view)
	Aud      string    // only hops issued to this delegate ("": every delegate)
	Resolved *bool     // only resolved hops (true) or unresolved ones (false); nil: both
	From     time.Time // only hops created at or after From (zero: no bound)
	To       time.Time // only hops created before To (zero: no bound)
	// After is where the last page ended (that page's last hop's Cursor);
	// nil starts with the newest hop.
	After *IssuedCursor
	Limit int // at most this many hops, 1 to MaxListLimit
}

// IssuedCursor is an issued hop's place in a listing: newest Created
// first, and among hops created at the same instant, by Aud and then Hop
// in descending byte order (as HopCursor, with the delegate for the
// delegator).
type IssuedCursor struct {
	Created  time.Time
	Aud, Hop string
}

// Cursor is h's place in a listing, for the next page's IssuedQuery.After.
func (h *Issued) Cursor() *IssuedCursor {
	return &IssuedCursor{Created: h.Created, Aud: h.Aud, Hop: h.Hop}
}

// Before reports whether c lists before o.
func (c IssuedCursor) Before(o IssuedCursor) bool {
	if !c.Created.Equal(o.Created) {
		return c.Created.After(o.Created)
	}
	if c.Aud != o.Aud {
		return c.Aud > o.Aud
	}
	return c.Hop > o.Hop
}

// Views is every view of an issued hop, in the lifecycle's order.
func Views() []View {
	return []View{Offered, ViewAccepted, ViewRejected, ViewComplete, ViewFailed, ViewCanceled}
}

// Valid reports whether v is one of the views.
func (v View) Valid() bool {
	switch v {
	case Offered, ViewAccepted, ViewRejected, ViewComplete, ViewFailed, ViewCanceled:
		return true
	}
	return false
}

// Check reports what is wrong with q, if anything.
func (q IssuedQuery) Check() error {
	var bad []string
	if q.View != "" && !q.View.Valid() {
		bad = append(bad, fmt.Sprintf("view %q is not a view of an issued hop", q.View))
	}
	bad = append(bad, pageProblems(q.Limit, q.From, q.To)...)
	if q.After != nil && !storable(q.After.Created) {
		bad = append(bad, "after: a cursor's created time must be a hop's (the years 1678 to 2262)")
	}
	if len(bad) > 0 {
		return fmt.Errorf("store: list issued: %w", errors.New(strings.Join(bad, "; ")))
	}
	return nil
}

// Matches reports whether q selects h, leaving aside After and Limit.
func (q IssuedQuery) Matches(h *Issued) bool {
	return (q.View == "" || h.View == q.View) &&
		(q.Aud == "" || h.Aud == q.Aud) &&
		(q.Resolved == nil || h.Resolved == *q.Resolved) &&
		(q.From.IsZero() || !h.Created.Before(q.From)) &&
		(q.To.IsZero() || h.Created.Before(q.To))
}
