package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

// The resolve actions the draft allows an operator (draft "Knowing the
// Outcome", "Forks, Concurrency, and Equivocation"), each recorded in the
// flag's resolution as "by NAME: ..." (the store keeps no other field
// for who), with the time the store stamps:
//
//   - an unknown outcome of a hop still accepted: finish it as the
//     operator observed it, "completed" or "failed" with nothing taken
//     effect (delegate.Finish signs and records that status, which the
//     delegator gets when it asks again), or release it when the outcome
//     cannot be learned (delegate.Release: no status is invented, the hop
//     stays accepted and may be swept);
//   - any other flag (equivocation, conflicting inputs, an unknown
//     outcome settled meanwhile): resolved with the operator's note.

const maxNote = 1000 // runes of an operator's note

// post dispatches the console's POSTs, each checked for the session's
// CSRF token.
func (c *console) post(w http.ResponseWriter, r *http.Request, op *consoleOp) {
	r.Body = http.MaxBytesReader(w, r.Body, maxConsoleForm)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, op, http.StatusBadRequest, errors.New("the form could not be read"))
		return
	}
	if !op.csrfOK(r) {
		c.fail(w, r, op, http.StatusForbidden, errors.New("this form is not from this session's page (CSRF token missing or wrong): reload the page and try again"))
		return
	}
	switch r.URL.Path {
	case "/signout":
		c.signOut(w, r, op)
	case "/resolve", "/finish", "/release":
		c.act(w, r, op, strings.TrimPrefix(r.URL.Path, "/"))
	default:
		c.fail(w, r, op, http.StatusNotFound, errors.New("no such action"))
	}
}

// openFlag returns the open flag id, or nil when no flag with this id
// is open: one indexed read (the newest open flag below id+1).
func (c *console) openFlag(ctx context.Context, id int64) (*store.Flag, error) {
	if id <= 0 || id == math.MaxInt64 {
		return nil, nil
	}
	fs, err := c.st.ListFlags(ctx, store.FlagQuery{Open: true, Before: id + 1, Limit: 1})
	if err != nil || len(fs) == 0 || fs[0].ID != id {
		return nil, err
	}
	return &fs[0], nil
}

// act runs one action on the open flag the form names.
func (c *console) act(w http.ResponseWriter, r *http.Request, op *consoleOp, action string) {
	ctx := r.Context()
	id, err := strconv.ParseInt(r.PostForm.Get("id"), 10, 64)
	if err != nil {
		c.fail(w, r, op, http.StatusBadRequest, errors.New("no flag named"))
		return
	}
	note := strings.TrimSpace(r.PostForm.Get("note"))
	switch {
	case note == "":
		c.fail(w, r, op, http.StatusBadRequest, errors.New("a resolution needs a note: what was observed or decided, and why"))
		return
	case len([]rune(note)) > maxNote:
		c.fail(w, r, op, http.StatusBadRequest, fmt.Errorf("a note is at most %d characters", maxNote))
		return
	}
	f, err := c.openFlag(ctx, id)
	if err != nil {
		c.fail(w, r, op, http.StatusServiceUnavailable, fmt.Errorf("the store: %w", err))
		return
	}
	if f == nil {
		c.fail(w, r, op, http.StatusConflict, errors.New("this flag is not open (resolved meanwhile?)"))
		return
	}
	by := "by " + op.Name + ": "
	now := c.now()
	switch action {
	case "resolve":
		if err = c.resolvable(ctx, f); err == nil {
			err = c.st.Resolve(ctx, f.ID, by+note, now)
		}
	case "finish", "release":
		d := c.s.operatorDelegate()
		switch {
		case c.issuedFlag(*f):
			err = fmt.Errorf("%w: the hop was issued by this gateway: its flag is resolved with a note", store.ErrConflict)
		case f.Kind != store.FlagUnknownOutcome:
			err = fmt.Errorf("%w: a %s flag is resolved with a note; only an unknown outcome is finished or released", store.ErrConflict, f.Kind)
		case d == nil:
			err = errors.New("this gateway has no route to sign a status with")
		case action == "release":
			err = d.Release(ctx, f.Iss, f.Hop, by+note)
		default:
			err = c.finish(r, d, f, by, note)
		}
	}
	switch {
	case errors.Is(err, store.ErrConflict):
		c.fail(w, r, op, http.StatusConflict, fmt.Errorf("nothing was changed: %v", err))
		return
	case err != nil:
		c.fail(w, r, op, http.StatusInternalServerError, err)
		return
	}
	c.log.Info("console: flag resolved", "operator", op.Name, "action", action, "flag", f.ID, "kind", f.Kind, "iss", f.Iss, "hop", f.Hop)
	switch r.PostForm.Get("back") {
	case "hop":
		consoleRedirect(w, string(hopHref(f.Iss, f.Hop)))
	case "issued":
		consoleRedirect(w, string(issuedHref(f.Hop)))
	default:
		consoleRedirect(w, "flags")
	}
}

// resolvable refuses (ErrConflict) to close with a note alone an unknown
// outcome of a hop received that is still accepted and not released:
// the hop would stay unsettled, kept for ever, and no longer be listed
// as flagged (draft "Knowing the Outcome": it is finished as observed, or
// released). A hop swept meanwhile has nothing left to settle.
func (c *console) resolvable(ctx context.Context, f *store.Flag) error {
	if f.Kind != store.FlagUnknownOutcome || c.issuedFlag(*f) {
		return nil
	}
	rec, err := c.st.Get(ctx, f.Iss, f.Hop)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	case rec.State == store.Accepted && rec.Released.IsZero():
		return fmt.Errorf("%w: the hop is still accepted and its outcome unknown: finish it as observed, or release it, rather than resolve the flag alone", store.ErrConflict)
	}
	return nil
}

// finish records the outcome the operator observed for the flag's hop
// and closes the hop's open unknown-outcome flags with it. Only a hop
// taken (accepted, released or not: Release's doc) has an outcome to
// finish; one received and never taken, or decided already, is refused
// (ErrConflict) before anything is signed.
func (c *console) finish(r *http.Request, d *delegate.Delegate, f *store.Flag, by, note string) error {
	ctx := r.Context()
	out := delegate.Outcome{Detail: "outcome as observed by the gateway's operator"}
	switch r.PostForm.Get("outcome") {
	case "completed":
		out.State = store.Completed
	case "failed":
		// The console's "failed" says nothing took effect; a failure
		// that took effect lists its refs, which a form cannot.
		out.State, out.NoEffect = store.Failed, true
	default:
		return errors.New(`the outcome observed is "completed" or "failed"`)
	}
	rec, err := c.st.Get(ctx, f.Iss, f.Hop)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: the hop is no longer recorded (swept?): resolve its flag with a note", store.ErrConflict)
	}
	if err != nil {
		return err
	}
	if rec.State != store.Accepted {
		return fmt.Errorf("%w: the hop is %s, not accepted: only work taken has an outcome to finish; resolve its flag with a note", store.ErrConflict, rec.State)
	}
	if _, err := d.Finish(ctx, f.Iss, f.Hop, out); err != nil {
		return err
	}
	// The hop's unknown-outcome flags close with the outcome; one that
	// another operator closed meanwhile is left as it is. When none was
	// left open, the finish is recorded as a resolved flag of its own
	// (as delegate.Release records a release), so that what the record
	// says and what the flags say agree.
	resolution := fmt.Sprintf("%sfinished as %s, as observed: %s", by, out.State, note)
	now := c.now()
	open, err := c.st.ListFlags(ctx, store.FlagQuery{Open: true, Hops: []store.HopKey{{Iss: f.Iss, Hop: f.Hop}}, Limit: store.MaxListLimit})
	if err != nil {
		return err
	}
	closed := false
	for _, o := range open {
		if o.Kind != store.FlagUnknownOutcome {
			continue
		}
		err := c.st.Resolve(ctx, o.ID, resolution, now)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return err
		}
		closed = true
	}
	if closed {
		return nil
	}
	id, err := c.st.Raise(ctx, store.Flag{Kind: store.FlagUnknownOutcome, Iss: f.Iss, Hop: f.Hop, Detail: "finished by the operator with no open flag", Created: now})
	if err != nil {
		return err
	}
	return c.st.Resolve(ctx, id, resolution, now)
}

// operatorDelegate is the delegate an operator's action goes through:
// every route's shares the store and the identity. nil when the gateway
// has no route.
func (s *Server) operatorDelegate() *delegate.Delegate {
	if len(s.routes) == 0 {
		return nil
	}
	return s.routes[0].delegate()
}
