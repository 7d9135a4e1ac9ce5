package gateway

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"

	"github.com/quantumlearningmachines/handoff/store"
)

// The flagged list (flags: the open flags; flags?all=1: every flag),
// newest first, a page at a time by the store's cursor (a flag's id:
// store.Store.ListFlags), and a flag as a row shows it, with the actions
// the draft allows on it (console_actions.go).

const flagsPage = 50 // flags a page of the flagged list

// flagsView is the flagged list.
type flagsView struct {
	All    bool
	Flags  []flagView
	Next   template.URL // the next (older) page, relative; "" on the last
	Newest template.URL // the first page; "" on it
	Err    string       // what is wrong with the query
}

// flags lists the flags, open ones or all, newest first.
func (c *console) flags(w http.ResponseWriter, r *http.Request, op *consoleOp) {
	ctx := r.Context()
	q := r.URL.Query()
	v := flagsView{All: q.Get("all") != ""}
	first := url.Values{}
	if v.All {
		first.Set("all", "1")
	}
	fq := store.FlagQuery{Open: !v.All, Limit: flagsPage + 1} // one more: is there a next page?
	if b := q.Get("before"); b != "" {
		v.Newest = template.URL("flags?" + first.Encode())
		id, err := strconv.ParseInt(b, 10, 64)
		if err != nil || id <= 0 {
			v.Err = "before: not a page of this list"
			c.render(w, r, http.StatusBadRequest, "flags", consoleFrame{Title: "Flagged", Nav: "flags", Op: op, Page: v})
			return
		}
		fq.Before = id
	}
	fs, err := c.st.ListFlags(ctx, fq)
	if err != nil {
		c.fail(w, r, op, http.StatusServiceUnavailable, fmt.Errorf("the store: %w", err))
		return
	}
	if len(fs) > flagsPage {
		fs = fs[:flagsPage]
		next := url.Values{"before": {strconv.FormatInt(fs[len(fs)-1].ID, 10)}}
		if v.All {
			next.Set("all", "1")
		}
		v.Next = template.URL("flags?" + next.Encode())
	}
	for _, f := range fs {
		var rec *store.Record
		var recErr error
		if f.Resolved.IsZero() && f.Kind == store.FlagUnknownOutcome && !c.issuedFlag(f) {
			// Whether the hop can still be finished or released.
			rec, recErr = c.st.Get(ctx, f.Iss, f.Hop)
			if errors.Is(recErr, store.ErrNotFound) {
				rec, recErr = nil, nil // swept: its flag is resolved with a note
			}
		}
		v.Flags = append(v.Flags, c.flagView(f, rec, recErr, op, "flags"))
	}
	c.render(w, r, http.StatusOK, "flags", consoleFrame{Title: "Flagged", Nav: "flags", Op: op, Page: v})
}

// flagView is a flag with the actions the draft allows on it.
type flagView struct {
	store.Flag
	HopHref template.URL
	// Settle: an unknown outcome of a hop still accepted and not
	// released: finished as observed, or released (draft "Knowing the
	// Outcome"). Otherwise an open flag is resolved with a note.
	Settle bool
	// Issued: a flag of a hop this gateway issued (HopHref is its page).
	Issued bool
	// Err: the hop's record could not be read, so which action the flag
	// takes is not known: none is offered.
	Err  string
	CSRF string
	Back string // "flags", "hop" or "issued": the page an action returns to
}

// flagView is f as a row shows it; rec is its hop's record (nil when
// none was read, or none is kept), recErr why it could not be read.
func (c *console) flagView(f store.Flag, rec *store.Record, recErr error, op *consoleOp, back string) flagView {
	v := flagView{Flag: f, HopHref: hopHref(f.Iss, f.Hop), CSRF: op.CSRF, Back: back}
	if c.issuedFlag(f) {
		// A flag of a hop this gateway issued (egress.go): the
		// delegator's side, which has no outcome to finish or release.
		v.HopHref, v.Issued = issuedHref(f.Hop), true
		return v
	}
	if recErr != nil && f.Resolved.IsZero() {
		v.Err = "the hop's record could not be read (" + oneLine(recErr) + "): reload the page to act on this flag"
		return v
	}
	v.Settle = f.Resolved.IsZero() && f.Kind == store.FlagUnknownOutcome && rec != nil && rec.State == store.Accepted && rec.Released.IsZero()
	return v
}

// issuedFlag reports whether f is about a hop this gateway issued: its
// iss is the gateway's own AgentId.
func (c *console) issuedFlag(f store.Flag) bool { return f.Iss == c.s.cfg.Load().Identity.ID }
