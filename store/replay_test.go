package store_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/internal/malleate"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/trust"
)

// TestReplayCopyIsRetransmission: store.Replay gives the receiver the
// recorded offer's signed content (SPEC D5), so a same-content copy is a
// retransmission (Result.Copy), also in a later run on the same SQLite
// file, and other content is equivocation; the record stays the first's.
func TestReplayCopyIsRetransmission(t *testing.T) {
	ctx := context.Background()
	k, err := trust.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	tk, err := trust.NewKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	keys := trust.New()
	if err := keys.Add("a", tk); err != nil {
		t.Fatal(err)
	}
	signer, err := handoff.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	path := filepath.Join(t.TempDir(), "hops.db")
	stores := []struct {
		name string
		open func() store.Store
	}{
		{"memory", func() store.Store { return store.NewMemory(now.Add(-time.Hour)) }},
		{"sqlite", func() store.Store {
			s, err := sqlite.Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
	}
	for _, sk := range stores {
		t.Run(sk.name, func(t *testing.T) {
			s := sk.open()
			recv := func(s store.Store, el handoff.Element) *handoff.Result {
				t.Helper()
				r, err := handoff.NewReceiver(handoff.Options{Me: "b", Keys: keys, Now: clock, Memory: store.Replay(s, clock)})
				if err != nil {
					t.Fatal(err)
				}
				b, err := (&handoff.Handoff{Offer: el}).Encode(handoff.JSON)
				if err != nil {
					t.Fatal(err)
				}
				res, _ := r.Receive(ctx, b, "")
				if res == nil {
					t.Fatal("no result")
				}
				return res
			}
			o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: "d", Iss: "a", Aud: "b", Iat: now.Unix(), Exp: now.Unix() + 100}
			first, err := signer.SignOffer(o, handoff.FormCOSE)
			if err != nil {
				t.Fatal(err)
			}
			if res := recv(s, first); res.Outcome != handoff.Accepted {
				t.Fatalf("first: %v %v", res.Outcome, res.Err)
			}
			b, err := malleate.COSESignature(first.Octets)
			if err != nil {
				t.Fatal(err)
			}
			cp := handoff.Element{Form: handoff.FormCOSE, Octets: b}
			again := s
			if sk.name == "sqlite" {
				s.Close()
				again = sk.open() // a later run
			}
			if res := recv(again, cp); res.Outcome != handoff.Retransmission || !res.Copy || !res.Remembered.Equal(first.Digest()) {
				t.Fatalf("copy: %v copy=%v %v", res.Outcome, res.Copy, res.Err)
			}
			o2 := *o
			o2.Task = "other"
			other, err := signer.SignOffer(&o2, handoff.FormCOSE)
			if err != nil {
				t.Fatal(err)
			}
			if res := recv(again, other); res.Outcome != handoff.Equivocation {
				t.Fatalf("other content: %v", res.Outcome)
			}
			r, err := again.Get(ctx, "a", o.Hop)
			if err != nil || !r.Digest.Equal(first.Digest()) {
				t.Fatalf("record %+v %v; want the first offer's", r, err)
			}
		})
	}
}
