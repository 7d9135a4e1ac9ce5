// Package storetest is the conformance suite of store.Store (in the spirit
// of golang.org/x/mod/sumdb/storage's test suite): every hop store runs
// Run, and the SQL stores also run RunOutcome. Each subtest is named after
// the rule it checks, taken from the doc comments of package store and the
// draft's "Lifecycle", "Freshness and Replay", "Asking Again" and "Knowing
// the Outcome".
//
// Every time value the suite passes to a store is derived from Base, so a
// failure reproduces exactly. (A SQL store stamps its initial Since with the
// wall clock when it is created; the suite only checks that it is stable.)
package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// Base is the suite's fixed "now". It has a nanosecond part so that a store
// that rounds times is caught.
var Base = time.Date(2026, time.May, 20, 12, 0, 0, 123456789, time.UTC)

// Iss is the issuer of the suite's hops.
const Iss = "https://agent.example/delegator"

// Retention is the suite's retention period.
const Retention = time.Hour

// keepFor is how long past Base a record is kept by default (exp + skew).
const keepFor = 5 * time.Minute

var allStates = []store.State{store.Received, store.Accepted, store.Rejected, store.Completed, store.Failed}

// Run runs the conformance suite. open must return a fresh, empty store on
// each call and arrange for it to be closed when t ends (t.Cleanup); Close
// may then be called twice, since one subtest closes the store itself.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"ClaimInsertsThenReturnsExisting", testClaimInsertsThenReturnsExisting},
		{"ClaimReturnsCurrentRecord", testClaimReturnsCurrentRecord},
		{"ClaimKeyIsIssAndHop", testClaimKeyIsIssAndHop},
		{"ClaimStoresEveryField", testClaimStoresEveryField},
		{"ClaimRefusesBadState", testClaimRefusesBadState},
		{"ClaimKeepsTheChain", testClaimKeepsTheChain},
		{"ClaimRefusesAChainWithoutItsForms", testClaimRefusesAChainWithoutItsForms},
		{"GetMissingIsErrNotFound", testGetMissingIsErrNotFound},
		{"ListMatchesTheModelByPages", testList},
		{"ListPageIsOneSnapshot", testListWhileMoving},
		{"TransitionFollowsCanMove", testTransitionFollowsCanMove},
		{"TransitionWrongFromIsConflict", testTransitionWrongFromIsConflict},
		{"TransitionMissingIsErrNotFound", testTransitionMissingIsErrNotFound},
		{"TransitionNilStatusKeepsStatusUnlessTerminal", testTransitionNilStatusKeepsStatus},
		{"TransitionChecksTheEquivocatedMark", testTransitionMark},
		{"StatusesKeptInOrder", testStatusesInOrder},
		{"ErrorsNameTheHop", testErrorsNameTheHop},
		{"TransitionTerminalStampsDecided", testTransitionTerminalStampsDecided},
		{"MarkCanceled", testMarkCanceled},
		{"MarkEquivocated", testMarkEquivocated},
		{"FlagsRaiseListResolve", testFlagsRaiseListResolve},
		{"ResolveTwiceOrUnknownIsConflict", testResolveTwiceOrUnknownIsConflict},
		{"ListFlagsNewestFirstByPages", testListFlags},
		{"SweepRetentionRule", testSweepRetentionRule},
		{"SweepZeroRetention", testSweepZeroRetention},
		{"SweepPrunesResolvedFlagsAfterRetention", testSweepPrunesFlags},
		{"ReleaseOnlyAcceptedOnce", testRelease},
		{"SweepReleasedAfterRetention", testSweepReleased},
		{"SweepManyRowsWithConcurrentClaims", testSweepMany},
		{"SinceIsStable", testSinceIsStable},
		{"ForgetDropsHopsKeepsFlagsMovesSince", testForget},
		{"ConcurrentClaimOneWinner", testConcurrentClaim},
		{"ConcurrentTransitionOneWinner", testConcurrentTransition},
		{"ConcurrentClaimsAndMovesEachAnswered", testConcurrentClaimsAndMoves},
		{"ClosedStoreReturnsErrClosed", testClosed},
	}
	tests = append(tests, heldTests...) // held.go
	tests = append(tests, copyTests...) // copies.go
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, open(t))
		})
	}
}

// Offer returns deterministic offer octets for a hop: every byte value, so
// that a store that mangles bytes (text columns, NUL, invalid UTF-8) is
// caught, then the hop and a variant number.
func Offer(hop string, variant int) []byte {
	b := make([]byte, 0, 256+len(hop)+8)
	for i := range 256 {
		b = append(b, byte(255-i))
	}
	return fmt.Appendf(b, "%s#%d", hop, variant)
}

// Status returns deterministic status octets labelled label, with a NUL and
// bytes that are not UTF-8.
func Status(label string) []byte {
	return append([]byte{0x00, 0xff, 0xfe, 0x80}, "status:"+label...)
}

// Chain returns deterministic chain elements for a hop, n of them, oldest
// first, with their forms: COSE, JWS and invalid in turn (a chain mixes
// forms, whatever its offer's), each element holding every byte value
// like Offer, then the hop, the variant and its index.
func Chain(hop string, variant, n int) ([][]byte, []handoff.Form) {
	chain, forms := make([][]byte, n), make([]handoff.Form, n)
	for i := range n {
		chain[i] = fmt.Appendf(Offer(hop, variant), "/chain[%d]", i)
		forms[i] = []handoff.Form{handoff.FormCOSE, handoff.FormJWS, handoff.FormInvalid}[i%3]
	}
	return chain, forms
}

// NewRecord returns the record of a hop (issuer Iss) claimed in state st at
// Base, kept until Base+5m. A Rejected record carries its status and is
// decided at Base. Its offer came with a chain of variant%3 elements
// (Chain), none (a nil Chain) when that is 0.
func NewRecord(hop string, st store.State, variant int) *store.Record {
	offer := Offer(hop, variant)
	r := &store.Record{
		Iss:       Iss,
		Hop:       hop,
		Digest:    handoff.DigestOf(offer),
		Offer:     offer,
		OfferForm: handoff.FormCOSE,
		State:     st,
		Received:  Base,
		KeepUntil: Base.Add(keepFor),
	}
	if n := variant % 3; n > 0 {
		r.Chain, r.ChainForms = Chain(hop, variant, n)
	}
	switch st {
	case store.Accepted:
		r.Status, r.StatusForm = Status(hop+"/accepted"), handoff.FormJWS
	case store.Rejected:
		r.Status, r.StatusForm = Status(hop+"/rejected"), handoff.FormCOSE
		r.Decided = Base
	}
	return r
}

// DiffRecord lists how got differs from want, field by field, every field
// of store.Record by reflection (so that a field added to Record is
// compared without anyone remembering to): byte slices exactly (a nil
// Status is not an empty one), other slices (Chain, ChainForms) nil apart
// from empty and then element by element (a chain element's octets by
// value: it has no nil of its own), times with Equal, structs member by
// member, the rest with ==.
func DiffRecord(got, want *store.Record) []string {
	if got == nil || want == nil {
		if got == want {
			return nil
		}
		return []string{fmt.Sprintf("record: got %v, want %v", got, want)}
	}
	return diffValue("", reflect.ValueOf(*got), reflect.ValueOf(*want), nil)
}

var timeType = reflect.TypeFor[time.Time]()

// diffValue appends to d how g differs from w, naming fields by path.
func diffValue(path string, g, w reflect.Value, d []string) []string {
	switch {
	case g.Type() == timeType:
		gt, wt := g.Interface().(time.Time), w.Interface().(time.Time)
		if !gt.Equal(wt) {
			d = append(d, fmt.Sprintf("%s: got %v, want %v", path, gt, wt))
		}
	case g.Kind() == reflect.Struct:
		for i := range g.NumField() {
			name := g.Type().Field(i).Name
			if path != "" {
				name = path + "." + name
			}
			d = diffValue(name, g.Field(i), w.Field(i), d)
		}
	case g.Kind() == reflect.Slice && g.Type().Elem().Kind() == reflect.Uint8:
		gb, wb := g.Bytes(), w.Bytes()
		if (gb == nil) != (wb == nil) || !bytes.Equal(gb, wb) {
			d = append(d, fmt.Sprintf("%s: got %s, want %s", path, octets(gb), octets(wb)))
		}
	case g.Kind() == reflect.Slice:
		if g.IsNil() != w.IsNil() || g.Len() != w.Len() {
			return append(d, fmt.Sprintf("%s: got %s, want %s", path, elements(g), elements(w)))
		}
		for i := range g.Len() {
			name := fmt.Sprintf("%s[%d]", path, i)
			ge, we := g.Index(i), w.Index(i)
			if ge.Kind() == reflect.Slice && ge.Type().Elem().Kind() == reflect.Uint8 {
				if !bytes.Equal(ge.Bytes(), we.Bytes()) {
					d = append(d, fmt.Sprintf("%s: got %s, want %s", name, octets(ge.Bytes()), octets(we.Bytes())))
				}
				continue
			}
			d = diffValue(name, ge, we, d)
		}
	default:
		if !g.Equal(w) {
			d = append(d, fmt.Sprintf("%s: got %v, want %v", path, g.Interface(), w.Interface()))
		}
	}
	return d
}

func elements(v reflect.Value) string {
	if v.IsNil() {
		return "nil"
	}
	return fmt.Sprintf("%d elements", v.Len())
}

func octets(b []byte) string {
	if b == nil {
		return "nil"
	}
	return fmt.Sprintf("%q", b)
}

func copyRecord(r *store.Record) *store.Record {
	c := *r
	c.Offer = bytes.Clone(r.Offer)
	if r.Chain != nil {
		c.Chain = make([][]byte, len(r.Chain))
		for i, el := range r.Chain {
			c.Chain[i] = bytes.Clone(el)
		}
	}
	c.ChainForms = slices.Clone(r.ChainForms)
	c.Status = bytes.Clone(r.Status)
	c.Earlier = bytes.Clone(r.Earlier)
	c.Digest.Val = bytes.Clone(r.Digest.Val)
	return &c
}

func checkRecord(t *testing.T, what string, got, want *store.Record) {
	t.Helper()
	if d := DiffRecord(got, want); d != nil {
		t.Errorf("%s differs:\n\t%s", what, strings.Join(d, "\n\t"))
	}
}

func mustGet(t *testing.T, s store.Store, hop string) *store.Record {
	t.Helper()
	r, err := s.Get(t.Context(), Iss, hop)
	if err != nil {
		t.Fatalf("Get(%s): %v", hop, err)
	}
	return r
}

func checkGet(t *testing.T, s store.Store, hop string, want *store.Record) {
	t.Helper()
	checkRecord(t, "Get("+hop+")", mustGet(t, s, hop), want)
}

func checkGone(t *testing.T, s store.Store, iss, hop string) {
	t.Helper()
	if r, err := s.Get(t.Context(), iss, hop); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(%s, %s) = %+v, %v; want ErrNotFound", iss, hop, r, err)
	}
}

func mustClaim(t *testing.T, s store.Store, r *store.Record) {
	t.Helper()
	got, inserted, err := s.Claim(t.Context(), copyRecord(r))
	if err != nil || !inserted {
		t.Fatalf("Claim(%s) = inserted %v, %v; want a new record", r.Hop, inserted, err)
	}
	checkRecord(t, "Claim("+r.Hop+") result", got, r)
}

func mustMove(t *testing.T, s store.Store, hop string, from, to store.State, status []byte, form handoff.Form, now time.Time) {
	t.Helper()
	if err := s.Transition(t.Context(), store.Move{Iss: Iss, Hop: hop, From: from, To: to, Status: status, Form: form, Now: now}); err != nil {
		t.Fatalf("Transition(%s, %s -> %s): %v", hop, from, to, err)
	}
}

// put stores a hop in state st (claimed, then moved through Received for a
// completed or failed hop) and returns its record as it should be stored.
func put(t *testing.T, s store.Store, hop string, st store.State) *store.Record {
	t.Helper()
	switch st {
	case store.Received, store.Accepted, store.Rejected:
		r := NewRecord(hop, st, 0)
		mustClaim(t, s, r)
		return r
	case store.Completed, store.Failed:
		r := NewRecord(hop, store.Received, 0)
		mustClaim(t, s, r)
		r.State, r.Status, r.StatusForm, r.Decided = st, Status(hop+"/"+string(st)), handoff.FormJWS, Base.Add(time.Minute)
		mustMove(t, s, hop, store.Received, st, r.Status, r.StatusForm, r.Decided)
		return r
	}
	t.Fatalf("put: unknown state %q", st)
	return nil
}
