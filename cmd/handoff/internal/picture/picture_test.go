package picture

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/trust"
)

// signers makes a key for each agent, trusting those in trusted.
func signers(t *testing.T, keys *trust.Config, trusted map[string]bool, ids ...string) map[string]*handoff.Signer {
	t.Helper()
	out := map[string]*handoff.Signer{}
	for _, id := range ids {
		k, err := trust.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		if trusted[id] {
			tk, err := trust.NewKey(&k.PublicKey)
			if err != nil {
				t.Fatal(err)
			}
			if err := keys.Add(id, tk); err != nil {
				t.Fatal(err)
			}
		}
		if out[id], err = handoff.NewSigner(k); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// chainOf signs a chain a -> b -> c -> d, the last offer on behalf of sub,
// and returns it as a Handoff.
func chainOf(t *testing.T, s map[string]*handoff.Signer, sub string) *handoff.Handoff {
	t.Helper()
	agents := []string{"https://a.example", "https://b.example", "https://c.example", "https://d.example"}
	var els []handoff.Element
	for i := range 3 {
		o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx", Iss: agents[i], Aud: agents[i+1], Iat: 1_700_000_000 + int64(i), Exp: 1_700_000_300}
		if i > 0 {
			d := els[i-1].Digest()
			o.Prev = &d
		}
		if i == 2 {
			o.Obo = &handoff.Principal{Sub: sub}
		}
		el, err := s[agents[i]].SignOffer(o, []handoff.Form{handoff.FormJWS, handoff.FormCOSE}[i%2])
		if err != nil {
			t.Fatal(err)
		}
		els = append(els, el)
	}
	return &handoff.Handoff{Offer: els[2], Chain: els[:2]}
}

// TestPicture: the chain's agents in order, each offer's signature as
// the trust configuration says (verified, unverifiable, or not checked),
// its link, and whether it has expired.
func TestPicture(t *testing.T) {
	keys := trust.New()
	s := signers(t, keys, map[string]bool{"https://b.example": true, "https://c.example": true},
		"https://a.example", "https://b.example", "https://c.example")
	h := chainOf(t, s, "alice")
	c := Of(h, keys, time.Unix(1_700_000_100, 0))
	if len(c.Offers) != 3 {
		t.Fatalf("%d offers", len(c.Offers))
	}
	want := []struct {
		from, to string
		start    Start
		link     Link
		sig      Signature
	}{
		{"https://a.example", "https://b.example", Started, LinkStart, Unverifiable},
		{"https://b.example", "https://c.example", NotFirst, LinkOK, Verified},
		{"https://c.example", "https://d.example", NotFirst, LinkOK, Verified},
	}
	for i, w := range want {
		o := c.Offers[i]
		if o.From != w.from || o.To != w.to || o.Start != w.start || o.Link != w.link || o.Signature != w.sig || o.Discontinuous || o.Expired {
			t.Errorf("offer %d: %+v; want %+v", i, o, w)
		}
	}
	if c.Offers[2].OnBehalfOf == nil || c.Offers[2].OnBehalfOf.Sub != "alice" {
		t.Errorf("obo: %+v", c.Offers[2].OnBehalfOf)
	}
	if late := Of(h, nil, time.Unix(1_700_000_400, 0)); !late.Offers[0].Expired || late.Offers[0].ExpiredFor != 100*time.Second || late.Offers[0].Signature != NotChecked {
		t.Errorf("expired, unchecked: %+v", late.Offers[0])
	}
	// Partial (the first offer carried is not the chain's first), and
	// discontinuous, and unreadable.
	partial := Of(&handoff.Handoff{Offer: h.Offer, Chain: h.Chain[1:]}, nil, time.Unix(1_700_000_100, 0))
	if partial.Offers[0].Start != Partial || partial.Offers[0].Link != LinkNotHere {
		t.Errorf("partial: %+v", partial.Offers[0])
	}
	gap := Of(&handoff.Handoff{Offer: h.Offer, Chain: []handoff.Element{h.Chain[0]}}, nil, time.Unix(1_700_000_100, 0))
	if !gap.Offers[1].Discontinuous || gap.Offers[1].Link != LinkMismatch {
		t.Errorf("a removed hop: %+v", gap.Offers[1])
	}
	junk := Of(&handoff.Handoff{Offer: h.Offer, Chain: []handoff.Element{{Form: handoff.FormJWS, Octets: []byte("a.b.c")}}}, nil, time.Unix(0, 0))
	if !junk.Offers[0].Unreadable || !junk.Offers[1].Discontinuous {
		t.Errorf("unreadable: %+v", junk.Offers)
	}
}

// TestSVG: the picture as a page draws it is one well-formed SVG
// document, every agent in order, and text the signers chose (here a
// principal) escaped: it opens no element, runs no script, loads nothing.
func TestSVG(t *testing.T) {
	keys := trust.New()
	s := signers(t, keys, map[string]bool{"https://a.example": true}, "https://a.example", "https://b.example", "https://c.example")
	hostile := "\u202emoc.elpmaxe\x01\x7f</text><script>alert(1)</script><image href=\"http://evil.example/x\"/>\ufffe"
	c := Of(chainOf(t, s, hostile), keys, time.Unix(1_700_000_100, 0))
	var b bytes.Buffer
	if err := c.SVG(&b); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	d := xml.NewDecoder(strings.NewReader(doc))
	var elements []string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		if se, ok := tok.(xml.StartElement); ok {
			elements = append(elements, se.Name.Local)
			for _, a := range se.Attr {
				if a.Name.Local == "href" {
					t.Errorf("an href in the picture: %v", a)
				}
			}
		}
	}
	for _, e := range elements {
		switch e {
		case "svg", "defs", "marker", "path", "style", "rect", "text", "line":
		default:
			t.Errorf("element <%s> in the picture", e)
		}
	}
	for i, a := range []string{"https://a.example", "https://b.example", "https://c.example", "https://d.example"} {
		at := strings.Index(doc, a)
		if at < 0 {
			t.Fatalf("agent %d (%s) not drawn", i, a)
		}
		doc = doc[at:]
	}
	if !strings.Contains(b.String(), "&lt;/text&gt;&lt;script&gt;") {
		t.Errorf("the principal is not drawn escaped")
	}
	// A bidi override (which would draw "https://x.example/\u202emoc..." as
	// another name) and the controls are written as escapes, as the
	// terminal's picture writes them.
	for _, raw := range []string{"\u202e", "\x01", "\x7f"} {
		if strings.Contains(b.String(), raw) {
			t.Errorf("the picture holds %q raw", raw)
		}
	}
	if !strings.Contains(b.String(), `\u202e`) && !strings.Contains(b.String(), `\x01`) {
		t.Errorf("the controls are not written as escapes")
	}
}
