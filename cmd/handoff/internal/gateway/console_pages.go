package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/picture"
	"github.com/quantumlearningmachines/handoff/store"
)

// The console's pages: the hops received (store.List), one hop (its
// record, chain, statuses, the hops issued onward for it and its flags),
// and the flagged list (store.Flags). The hops issued onward have theirs
// in console_issued.go.

const (
	hopsPage    = 50  // hops a page, unless the query's n says
	maxHopsPage = 200 // the most n may ask
)

// hopRow is one hop in a listing.
type hopRow struct {
	*store.Record
	Href    template.URL // its page, relative
	Flagged bool         // it has an open flag
}

// hopsView is the listing page.
type hopsView struct {
	States               []store.State
	State, Iss, From, To string // the filters as given
	Flagged              bool
	Aud                  string       // an aud asked for that no received hop has
	AudHref              template.URL // the hops issued to that aud
	Rows                 []hopRow
	Next                 template.URL // the next page, relative; "" on the last
	Err                  string       // what is wrong with the filters
	Newest               template.URL // the first page with these filters; "" on it
}

// consoleTimeInput is how the filters' times are written (the form's
// datetime-local inputs), in UTC.
const consoleTimeInput = "2006-01-02T15:04"

// hops lists the hops received, newest first, a page at a time.
func (c *console) hops(w http.ResponseWriter, r *http.Request, op *consoleOp) {
	ctx := r.Context()
	q := r.URL.Query()
	v := hopsView{States: store.States(), State: q.Get("state"), Iss: q.Get("iss"), From: q.Get("from"), To: q.Get("to"),
		Flagged: q.Get("flagged") != ""}
	if q.Get("after") != "" {
		v.Newest = template.URL("./?" + filters(q).Encode())
	}
	hq := store.HopQuery{State: store.State(v.State), Iss: v.Iss, Flagged: v.Flagged, Limit: hopsPage}
	pg := readPage(q, v.From, v.To, &hq.Limit)
	hq.From, hq.To = pg.from, pg.to
	bad := pg.bad
	if pg.after != nil {
		hq.After = &store.HopCursor{Received: pg.after.at, Iss: pg.after.who, Hop: pg.after.hop}
	}
	me := c.s.cfg.Load().Identity.ID
	// Every hop received is addressed to this gateway: an aud filter
	// either keeps them all or none.
	if aud := q.Get("aud"); aud != "" && aud != me {
		v.Aud, v.AudHref = aud, onwardHref(aud)
	}
	if len(bad) == 0 {
		if err := hq.Check(); err != nil {
			bad = append(bad, err.Error())
		}
	}
	code := http.StatusOK
	if len(bad) > 0 {
		v.Err, code = strings.Join(bad, "; "), http.StatusBadRequest
	} else if v.Aud == "" {
		want := hq.Limit
		hq.Limit++ // one more: is there a next page? (maxHopsPage < store.MaxListLimit)
		recs, err := c.st.List(ctx, hq)
		if err != nil {
			c.fail(w, r, op, http.StatusServiceUnavailable, fmt.Errorf("the store: %w", err))
			return
		}
		if len(recs) > want {
			recs = recs[:want]
			next := filters(q)
			last := recs[len(recs)-1]
			next.Set("after", encodePlace(last.Received, last.Iss, last.Hop))
			v.Next = template.URL("?" + next.Encode())
		}
		flagged, err := c.flaggedAmong(ctx, recs)
		if err != nil {
			c.fail(w, r, op, http.StatusServiceUnavailable, fmt.Errorf("the store: %w", err))
			return
		}
		for _, rec := range recs {
			v.Rows = append(v.Rows, hopRow{Record: rec, Href: hopHref(rec.Iss, rec.Hop), Flagged: flagged[store.HopKey{Iss: rec.Iss, Hop: rec.Hop}]})
		}
	}
	c.render(w, r, code, "hops", consoleFrame{Title: "Hops", Nav: "hops", Op: op, Page: v})
}

// flaggedAmong says which of a page's hops have an open flag: one read
// of those hops' open flags (store.FlagQuery.Hops), and, in the unlikely
// case that they have more than a listing's page of them, one read for
// each hop not yet seen flagged.
func (c *console) flaggedAmong(ctx context.Context, recs []*store.Record) (map[store.HopKey]bool, error) {
	flagged := map[store.HopKey]bool{}
	if len(recs) == 0 {
		return flagged, nil
	}
	keys := make([]store.HopKey, len(recs))
	for i, rec := range recs {
		keys[i] = store.HopKey{Iss: rec.Iss, Hop: rec.Hop}
	}
	fs, err := c.st.ListFlags(ctx, store.FlagQuery{Open: true, Hops: keys, Limit: store.MaxListLimit})
	if err != nil {
		return nil, err
	}
	for _, f := range fs {
		flagged[store.HopKey{Iss: f.Iss, Hop: f.Hop}] = true
	}
	if len(fs) < store.MaxListLimit {
		return flagged, nil
	}
	for _, k := range keys {
		if flagged[k] {
			continue
		}
		fs, err := c.st.ListFlags(ctx, store.FlagQuery{Open: true, Hops: []store.HopKey{k}, Limit: 1})
		if err != nil {
			return nil, err
		}
		flagged[k] = len(fs) > 0
	}
	return flagged, nil
}

// filters is the listing's query without its place (after).
func filters(q url.Values) url.Values {
	f := url.Values{}
	for k, vs := range q {
		if k != "after" {
			f[k] = vs
		}
	}
	return f
}

// filterTime reads a filter's time: the form's "2006-01-02T15:04"
// (seconds optional) in UTC, or RFC 3339; "" is no bound.
func filterTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, f := range []string{consoleTimeInput, consoleTimeInput + ":05", time.RFC3339Nano} {
		if t, err := time.ParseInLocation(f, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("a time is written 2006-01-02T15:04 (UTC) or in RFC 3339")
}

// encodePlace is a listing's place (a hop's time, its delegator or
// delegate, and its id: store.HopCursor, store.IssuedCursor) as a link
// carries it: opaque to the operator, checked again (HopQuery.Check,
// IssuedQuery.Check) when it comes back.
func encodePlace(at time.Time, who, hop string) string {
	b, _ := json.Marshal(struct {
		At  int64  `json:"t"`
		Who string `json:"i"`
		Hop string `json:"h"`
	}{at.UnixNano(), who, hop})
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodePlace reads what encodePlace wrote.
// listPage is what a page of either listing (hops, issued hops) reads from
// its query: how many, the time window, and where it begins.
type listPage struct {
	from, to time.Time
	after    *place // nil: the newest
	bad      []string
}

type place struct {
	at       time.Time
	who, hop string
}

// readPage reads n (into *limit, which keeps its default when n is
// absent), from, to and after.
func readPage(q url.Values, from, to string, limit *int) listPage {
	var pg listPage
	if n := q.Get("n"); n != "" {
		if k, err := strconv.Atoi(n); err != nil || k < 1 || k > maxHopsPage {
			pg.bad = append(pg.bad, fmt.Sprintf("n: a page holds 1 to %d hops", maxHopsPage))
		} else {
			*limit = k
		}
	}
	var err error
	if pg.from, err = filterTime(from); err != nil {
		pg.bad = append(pg.bad, "from: "+err.Error())
	}
	if pg.to, err = filterTime(to); err != nil {
		pg.bad = append(pg.bad, "to: "+err.Error())
	}
	if a := q.Get("after"); a != "" {
		at, who, hop, err := decodePlace(a)
		if err != nil {
			pg.bad = append(pg.bad, "after: not a page of this listing")
		}
		pg.after = &place{at: at, who: who, hop: hop}
	}
	return pg
}

func decodePlace(s string) (at time.Time, who, hop string, err error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, "", "", err
	}
	var p struct {
		At  *int64 `json:"t"`
		Who string `json:"i"`
		Hop string `json:"h"`
	}
	if err := json.Unmarshal(b, &p); err != nil || p.At == nil {
		return time.Time{}, "", "", errors.New("not a cursor")
	}
	return time.Unix(0, *p.At), p.Who, p.Hop, nil
}

// hopHref is a hop's page, relative to the console.
func hopHref(iss, hop string) template.URL {
	return template.URL("hop?" + url.Values{"iss": {iss}, "hop": {hop}}.Encode())
}

// hopView is a hop's page.
type hopView struct {
	Rec    *store.Record
	Dialog string
	Chain  template.HTML // the picture (picture.Chain.SVG: every text escaped)
	// The chain checked again as received (the draft's steps 1-7 at the
	// time the hop was received, with the trust file as it is now).
	Quality, Verdict string
	ChainKept        bool // the record keeps the chain the offer came with
	HasPrev          bool // the offer names an offer before it
	OfferRefs        []refView
	// Statuses: every status sent for the hop, oldest first
	// (store.Record.Statuses); LastSent: the record holds a last status
	// (a terminal state recorded with none holds only what came before).
	Statuses []*statusView
	LastSent bool
	// Onward: the first onwardShown of the hops issued onward for it;
	// OnwardMore, how many more there are.
	Onward     []onwardRow
	OnwardMore int
	OnwardErr  string
	// Flags: its newest hopFlagsShown flags; MoreFlags, whether it has
	// older ones.
	Flags     []flagView
	MoreFlags bool
}

const (
	onwardShown   = 50  // hops issued onward a hop's page lists
	hopFlagsShown = 100 // flags a hop's page lists
)

// onwardRow is a hop issued onward, with its page.
type onwardRow struct {
	*store.Issued
	Href template.URL
}

// refView is one context reference, with what is known of it.
type refView struct {
	Kind, Dig, Loc string
	Outcome        string // the offer's: step 7's outcome; the status's: what the ref is
}

// statusView is a status decoded for display: one the gateway sent for a
// hop, or a downstream's for a hop it issued.
type statusView struct {
	State, Reason, Detail, Aud string
	Iat                        time.Time
	Form                       handoff.Form
	Refs                       []refView
	Err                        string // it does not decode
}

// hop shows one hop.
func (c *console) hop(w http.ResponseWriter, r *http.Request, op *consoleOp) {
	ctx := r.Context()
	iss, hop := r.URL.Query().Get("iss"), r.URL.Query().Get("hop")
	rec, err := c.st.Get(ctx, iss, hop)
	if errors.Is(err, store.ErrNotFound) {
		c.fail(w, r, op, http.StatusNotFound, errors.New("no hop of this delegator with this id is recorded (it may have been swept)"))
		return
	}
	if err != nil {
		c.fail(w, r, op, http.StatusServiceUnavailable, fmt.Errorf("the store: %w", err))
		return
	}
	v := hopView{Rec: rec, ChainKept: rec.Chain != nil}
	h, err := rec.Handoff()
	if err != nil {
		c.fail(w, r, op, http.StatusInternalServerError, err)
		return
	}
	if o, _, err := handoff.UnsafeDecode(h.Offer); err == nil && o != nil {
		v.Dialog, v.HasPrev = o.Dialog, o.Prev != nil
	}
	keys := c.s.keys.Load()
	var svg bytes.Buffer
	if err := picture.Of(h, keys, c.now()).SVG(&svg); err == nil {
		v.Chain = template.HTML(svg.String())
	}
	v.Quality, v.Verdict, v.OfferRefs = c.recheck(ctx, rec, h, v.Dialog)
	for _, st := range rec.Statuses() {
		v.Statuses = append(v.Statuses, decodeStatus(st.Octets, st.Form))
	}
	v.LastSent = rec.Status != nil
	if tr := trackerOf(c.s.store); tr != nil {
		is, err := tr.ByPrev(ctx, rec.Digest)
		if err != nil {
			v.OnwardErr = err.Error()
		}
		if len(is) > onwardShown {
			is, v.OnwardMore = is[:onwardShown], len(is)-onwardShown
		}
		for _, i := range is {
			v.Onward = append(v.Onward, onwardRow{Issued: i, Href: issuedHref(i.Hop)})
		}
	} else {
		v.OnwardErr = "this store keeps no hops issued onward"
	}
	fs, more, err := c.flagsOf(ctx, iss, hop)
	if err != nil {
		c.fail(w, r, op, http.StatusServiceUnavailable, fmt.Errorf("the store: %w", err))
		return
	}
	v.MoreFlags = more
	for _, f := range fs {
		v.Flags = append(v.Flags, c.flagView(f, rec, nil, op, "hop"))
	}
	c.render(w, r, http.StatusOK, "hop", consoleFrame{Title: "Hop " + shortHop(hop), Nav: "hops", Op: op, Page: v})
}

// flagsOf is a hop's newest hopFlagsShown flags, open or resolved, and
// whether it has more.
func (c *console) flagsOf(ctx context.Context, iss, hop string) ([]store.Flag, bool, error) {
	fs, err := c.st.ListFlags(ctx, store.FlagQuery{Hops: []store.HopKey{{Iss: iss, Hop: hop}}, Limit: hopFlagsShown + 1})
	if err != nil {
		return nil, false, err
	}
	if len(fs) > hopFlagsShown {
		return fs[:hopFlagsShown], true, nil
	}
	return fs, false, nil
}

// recheck runs the receiving checks again on the hop's Handoff as the
// gateway ran them when it was received (its clock then, a fresh
// memory, today's trust file): the chain's quality (D7) and each of the
// offer's references' outcome (step 7) from the one Receiver, never a
// second reading of the chain.
func (c *console) recheck(ctx context.Context, rec *store.Record, h *handoff.Handoff, dialog string) (quality, verdict string, refs []refView) {
	cfg := c.s.cfg.Load()
	o := cfg.Policy.Options(cfg.Identity.ID, c.s.keys.Load())
	o.Now = func() time.Time { return rec.Received }
	rcv, err := handoff.NewReceiver(o)
	if err != nil {
		return "", err.Error(), nil
	}
	res, err := rcv.ReceiveParsed(ctx, h, nil, dialog)
	if res == nil {
		return "", err.Error(), nil
	}
	if res.Outcome != handoff.Accepted {
		verdict = fmt.Sprintf("checked again with today's trust file: %s (%s): %v", res.Outcome, res.Reason, res.Err)
	}
	if res.Offer != nil {
		for i, r := range res.Offer.Refs {
			out := "not checked"
			if i < len(res.Refs) {
				out = string(res.Refs[i])
			}
			refs = append(refs, ref(r, out))
		}
	}
	return string(res.ChainQuality), verdict, refs
}

func ref(r handoff.ContextRef, outcome string) refView {
	return refView{Kind: r.Kind, Dig: r.Dig.String(), Loc: r.Loc, Outcome: outcome}
}

// decodeStatus decodes the gateway's own status octets for display.
func decodeStatus(b []byte, form handoff.Form) *statusView {
	_, st, err := handoff.UnsafeDecode(handoff.Element{Form: form, Octets: b})
	if err != nil || st == nil {
		return &statusView{Form: form, Err: "the status recorded does not decode as a status"}
	}
	v := &statusView{State: string(st.State), Reason: string(st.Reason), Detail: st.Detail, Aud: st.Aud,
		Iat: time.Unix(st.Iat, 0), Form: form}
	// What a status's refs are (draft "Context References"): the result
	// of completed work, or what took effect of failed work.
	what := "ref"
	switch st.State {
	case handoff.StateCompleted:
		what = "the result"
	case handoff.StateFailed:
		what = "took effect"
	}
	for _, r := range st.Refs {
		v.Refs = append(v.Refs, ref(r, what))
	}
	return v
}

// trackerOf is the delegator's side of st, nil when it keeps none.
func trackerOf(st store.Store) store.Tracker {
	if m, ok := st.(meteredStore); ok {
		st = m.Store
	}
	t, _ := st.(store.Tracker)
	return t
}
