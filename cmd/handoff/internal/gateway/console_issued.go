package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/picture"
	"github.com/quantumlearningmachines/handoff/store"
)

// The console's pages of the hops this gateway issued onward (its egress,
// the delegator's side: store.Tracker): the listing (store.Tracker.
// ListIssued) and one issued hop.

// onwardView is the listing of the hops issued onward.
type onwardView struct {
	Views                         []store.View
	View, Aud, Resolved, From, To string // the filters as given
	Rows                          []onwardRow
	Next                          template.URL // the next page, relative; "" on the last
	Newest                        template.URL // the first page with these filters; "" on it
	Err                           string       // what is wrong with the filters
}

// onward lists the hops this gateway issued, newest first, a page at a
// time.
func (c *console) onward(w http.ResponseWriter, r *http.Request, op *consoleOp) {
	ctx := r.Context()
	tr := trackerOf(c.s.store)
	if tr == nil {
		c.fail(w, r, op, http.StatusNotFound, errors.New("this store keeps no hops issued onward"))
		return
	}
	q := r.URL.Query()
	v := onwardView{Views: store.Views(), View: q.Get("view"), Aud: q.Get("aud"), Resolved: q.Get("resolved"), From: q.Get("from"), To: q.Get("to")}
	if q.Get("after") != "" {
		v.Newest = template.URL("onward?" + filters(q).Encode())
	}
	iq := store.IssuedQuery{View: store.View(v.View), Aud: v.Aud, Limit: hopsPage}
	var bad []string
	switch v.Resolved {
	case "":
	case "yes", "no":
		yes := v.Resolved == "yes"
		iq.Resolved = &yes
	default:
		bad = append(bad, `resolved: "yes", "no" or nothing`)
	}
	pg := readPage(q, v.From, v.To, &iq.Limit)
	iq.From, iq.To = pg.from, pg.to
	bad = append(bad, pg.bad...)
	if pg.after != nil {
		iq.After = &store.IssuedCursor{Created: pg.after.at, Aud: pg.after.who, Hop: pg.after.hop}
	}
	if len(bad) == 0 {
		if err := iq.Check(); err != nil {
			bad = append(bad, err.Error())
		}
	}
	code := http.StatusOK
	if len(bad) > 0 {
		v.Err, code = strings.Join(bad, "; "), http.StatusBadRequest
	} else {
		want := iq.Limit
		iq.Limit++ // one more: is there a next page? (maxHopsPage < store.MaxListLimit)
		hs, err := tr.ListIssued(ctx, iq)
		if err != nil {
			c.fail(w, r, op, http.StatusServiceUnavailable, fmt.Errorf("the store: %w", err))
			return
		}
		if len(hs) > want {
			hs = hs[:want]
			last := hs[len(hs)-1]
			next := filters(q)
			next.Set("after", encodePlace(last.Created, last.Aud, last.Hop))
			v.Next = template.URL("onward?" + next.Encode())
		}
		for _, h := range hs {
			v.Rows = append(v.Rows, onwardRow{Issued: h, Href: issuedHref(h.Hop)})
		}
	}
	c.render(w, r, code, "onward", consoleFrame{Title: "Issued", Nav: "onward", Op: op, Page: v})
}

// onwardHref is the listing of the hops issued to aud, relative.
func onwardHref(aud string) template.URL {
	return template.URL("onward?" + url.Values{"aud": {aud}}.Encode())
}

// issuedHref is the page of a hop this gateway issued, relative.
func issuedHref(hop string) template.URL {
	return template.URL("issued?" + url.Values{"hop": {hop}}.Encode())
}

// issuedView is the page of a hop this gateway issued onward.
type issuedView struct {
	I      *store.Issued
	Dialog string
	Chain  template.HTML // its offer alone: the chain it carried is not kept
	Status *statusView   // the downstream's, verified when taken in
	// Flags: its newest hopFlagsShown flags; MoreFlags, whether it has
	// older ones.
	Flags     []flagView
	MoreFlags bool
}

// issued shows a hop this gateway issued (the delegator's side).
func (c *console) issued(w http.ResponseWriter, r *http.Request, op *consoleOp) {
	ctx := r.Context()
	hop := r.URL.Query().Get("hop")
	tr := trackerOf(c.s.store)
	if tr == nil {
		c.fail(w, r, op, http.StatusNotFound, errors.New("this store keeps no hops issued onward"))
		return
	}
	i, err := tr.IssuedHop(ctx, hop)
	if errors.Is(err, store.ErrNotFound) {
		c.fail(w, r, op, http.StatusNotFound, errors.New("this gateway issued no hop with this id (or it has been swept)"))
		return
	}
	if err != nil {
		c.fail(w, r, op, http.StatusServiceUnavailable, fmt.Errorf("the store: %w", err))
		return
	}
	v := issuedView{I: i}
	h := &handoff.Handoff{Offer: handoff.Element{Form: i.OfferForm, Octets: i.Offer}}
	if o, _, err := handoff.UnsafeDecode(h.Offer); err == nil && o != nil {
		v.Dialog = o.Dialog
	}
	var svg bytes.Buffer
	if err := picture.Of(h, c.s.keys.Load(), c.now()).SVG(&svg); err == nil {
		v.Chain = template.HTML(svg.String())
	}
	if i.Status != nil {
		v.Status = decodeStatus(i.Status, i.StatusForm)
	}
	// Its flags are the gateway's own, as their delegator (egress.go).
	fs, more, err := c.flagsOf(ctx, c.s.cfg.Load().Identity.ID, hop)
	if err != nil {
		c.fail(w, r, op, http.StatusServiceUnavailable, fmt.Errorf("the store: %w", err))
		return
	}
	v.MoreFlags = more
	for _, f := range fs {
		v.Flags = append(v.Flags, c.flagView(f, nil, nil, op, "issued"))
	}
	c.render(w, r, http.StatusOK, "issued", consoleFrame{Title: "Issued hop " + shortHop(hop), Nav: "onward", Op: op, Page: v})
}
