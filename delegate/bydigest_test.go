package delegate_test

import (
	"context"
	"slices"
	"testing"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
)

// D9 and draft "Lifecycle": a verified cancel that names only its offer
// (a host that knows only the digest, as MCP's notifications/cancelled)
// reaches the hop wherever the offer was taken: on another replica
// sharing the store (PostgreSQL), after a restart (SQLite reopened), or
// through another Delegate on the same store (memory). The delegate finds
// the hop by the offer's digest (store.Store.HopOf), marks it canceled,
// asks Stop, and keeps no held cancel for it.
func TestCancelByDigestOnAnotherReplica(t *testing.T) {
	for _, k := range d5Stores {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			s, again := k.open(t, w)
			first := w.delegate(s, nil)
			b, o := w.offer("")
			if a, err := first.Receive(ctx, b, "ctx", "planner"); err != nil || !a.Take {
				t.Fatalf("Receive: %+v, %v", a, err)
			}
			var log workLog
			s2 := again()
			second := w.delegate(s2, func(c *delegate.Config) { c.Stop = log.stop })
			rec, err := second.Cancel(ctx, cancelStatus(t, w, b), o.Iss, "")
			if err != nil || rec == nil || rec.Hop != o.Hop || !rec.Canceled {
				t.Fatalf("Cancel by digest on another replica: %+v, %v; want the hop's record, canceled", rec, err)
			}
			got, err := s2.Get(ctx, o.Iss, o.Hop)
			if err != nil || !got.Canceled {
				t.Fatalf("record %+v, %v; want canceled", got, err)
			}
			log.mu.Lock()
			stopped := slices.Clone(log.stopped)
			log.mu.Unlock()
			if !slices.Contains(stopped, o.Hop) {
				t.Fatalf("stopped %v; want the hop's work asked to stop", stopped)
			}
			h, err := handoff.ParseHandoff(b, handoff.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if held, err := s2.HeldFor(ctx, o.Iss, h.Offer.Digest()); err == nil && held != nil {
				t.Fatalf("a cancel applied to its hop is still held: %+v", held)
			}
		})
	}
}
