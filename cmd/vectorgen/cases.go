package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"
)

// AgentIds.
const (
	A = "https://assistant.example"
	P = "https://planner.example"
	C = "https://coder.example"
	T = "https://tester.example" // the receiver of most vectors
	X = "https://outsider.example"
)

const dialogID = "ctx-7f3a9c2e"

// hop is a deterministic 16-octet hop identifier for a vector's i-th offer.
func hop(name string, i int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("hop/%s/%d", name, i)))
	return b64.EncodeToString(h[:16])
}

func sha(b []byte) []byte { h := sha256.Sum256(b); return h[:] }

// dig is a sha-256 Digest of b.
func dig(b []byte) *obj { return newObj("alg", "sha-256", "val", b64.EncodeToString(sha(b))) }

func offerObj(hopID, iss, aud string, iat, exp int64) *obj {
	return newObj("v", 1, "type", "offer", "hop", hopID, "dialog", dialogID, "iss", iss, "aud", aud, "iat", iat, "exp", exp)
}

func ref(kind string, content string) *obj {
	return newObj("kind", kind, "dig", dig([]byte(content)))
}

func (g *gen) ag(id string) *agent {
	if a := g.byID[id]; a != nil {
		return a
	}
	return g.agents["outsider"] // an id nobody trusts: sign with the outsider's key
}

// ---- Handoffs ----

func handoffTree(offer any, chain []any) *obj {
	h := newObj("offer", offer)
	if chain != nil {
		h.add("chain", chain)
	}
	return h
}

func encode(cbor bool, v any) []byte {
	if cbor {
		return toCBOR(v)
	}
	return toJSON(v)
}

func ext(cbor bool) string {
	if cbor {
		return "cbor"
	}
	return "json"
}

// h registers a vector carrying offer (and chain, nil for none) in a JSON
// or CBOR Handoff. The expected offer digest is that of offer when it is a
// signed element, else null.
func (g *gen) h(name, rule string, cbor bool, offer any, chain []any) *V {
	v := g.newV(name, rule, ext(cbor), encode(cbor, handoffTree(offer, chain)))
	if e, ok := offer.(elem); ok {
		v.offerDigest(e.octets)
	}
	return v
}

// raw registers a vector with the given file octets and a null digest.
func (g *gen) raw(name, rule, ext string, data []byte) *V {
	return g.newV(name, rule, ext, data)
}

// ---- single offers ----

// offer returns the default offer from the coder to the tester, fresh at
// now, with hop derived from name, after mut.
func (g *gen) offer(name string, mut func(*obj)) *obj {
	o := offerObj(hop(name, 0), C, T, now-30, now+210)
	if mut != nil {
		mut(o)
	}
	return o
}

// single signs the default offer (after mut) by its iss in form f.
func (g *gen) single(name string, f form, mut func(*obj)) elem {
	o := g.offer(name, mut)
	signer := g.agents["coder"]
	if iss, ok := o.get("iss").(string); ok {
		signer = g.ag(iss)
	}
	return signer.sign(f, o)
}

// ---- chains ----

type hs struct {
	iss, aud string
	signer   *agent // nil: the iss's own key (the outsider's for an untrusted id)
	f        form
	iat, exp int64 // 0: default timing
	mut      func(i int, o *obj)
	post     func(e elem) any            // what is carried instead of the signed element
	signFn   func(a *agent, o *obj) elem // signs instead of a.sign(f, o)
}

// path returns hops along ids: ids[0] -> ids[1] -> ... ; the last hop is
// the offer.
func path(ids ...string) []hs {
	var out []hs
	for i := 0; i+1 < len(ids); i++ {
		out = append(out, hs{iss: ids[i], aud: ids[i+1], f: fJWS})
	}
	return out
}

// mixed sets forms JWS, COSE, COSE without kid in turn.
func mixed(h []hs) []hs {
	fs := []form{fJWS, fCOSE, fCOSENoKid}
	for i := range h {
		h[i].f = fs[i%3]
	}
	return h
}

func allForm(h []hs, f form) []hs {
	for i := range h {
		h[i].f = f
	}
	return h
}

// build signs the hops in order, each naming the previous carried element
// in prev. Default timing: the offer (last) is issued at now-30 and lives
// 240 s; each earlier one 10 s before the next.
func (g *gen) build(name string, hops []hs) (offer any, chain []any, signed []elem) {
	n := len(hops) - 1
	carried := make([]any, len(hops))
	for i, h := range hops {
		iat, exp := now-30-10*int64(n-i), now-30-10*int64(n-i)+240
		if h.iat != 0 {
			iat = h.iat
		}
		if h.exp != 0 {
			exp = h.exp
		}
		o := offerObj(hop(name, i), h.iss, h.aud, iat, exp)
		if i > 0 {
			if p := carriedOctets(carried[i-1]); p != nil {
				o.set("prev", dig(p))
			}
		}
		if h.mut != nil {
			h.mut(i, o)
		}
		signer := h.signer
		if signer == nil {
			signer = g.ag(h.iss)
		}
		f := h.f
		if f == "" {
			f = fJWS
		}
		var e elem
		if h.signFn != nil {
			e = h.signFn(signer, o)
		} else {
			e = signer.sign(f, o)
		}
		signed = append(signed, e)
		carried[i] = e
		if h.post != nil {
			carried[i] = h.post(e)
		}
	}
	if n == 0 {
		return carried[0], nil, signed
	}
	return carried[n], carried[:n], signed
}

// carriedOctets are the octets SPEC 4 digests for a carried element:
// a JWS's ASCII, the octets base64url text decodes to, a byte string.
func carriedOctets(v any) []byte {
	switch x := v.(type) {
	case elem:
		return x.octets
	case bs:
		return x
	case string:
		if strings.Contains(x, ".") {
			return []byte(x)
		}
		if b, err := b64.DecodeString(x); err == nil {
			return b
		}
	}
	return nil
}

// relayPath is A -> relay01 -> ... -> relay(n-1) -> C -> T: n chain
// elements and the offer, every iss distinct.
func relayPath(n int) []string {
	ids := []string{A}
	for i := 1; i < n; i++ {
		ids = append(ids, relayID(i))
	}
	return append(ids, C, T)
}

// ---- element mutations ----

func jwsSplit(e elem) (h, p, s string) {
	parts := strings.Split(string(e.octets), ".")
	if len(parts) != 3 {
		panic("not a JWS")
	}
	return parts[0], parts[1], parts[2]
}

func jwsJoin(h, p, s string) elem { return elem{octets: []byte(h + "." + p + "." + s)} }

// flipChar replaces the base64url character at i with another one whose
// 6-bit value differs only in its top bit, so that the decoded octets
// change and the encoding stays canonical (i is not the last character).
func flipChar(s string, i int) string {
	const alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	v := strings.IndexByte(alpha, s[i])
	return s[:i] + string(alpha[v^0x20]) + s[i+1:]
}

// reencodePart decodes a JWS part, changes its octets, encodes it again.
func reencodePart(part string, f func([]byte) []byte) string {
	b, err := b64.DecodeString(part)
	if err != nil {
		panic(err)
	}
	return b64.EncodeToString(f(bytes.Clone(b)))
}

// replaceOnce changes the first old in b to new (same length or not).
func replaceOnce(b []byte, old, new string) []byte {
	i := bytes.Index(b, []byte(old))
	if i < 0 {
		panic("replaceOnce: " + old + " not found")
	}
	return append(append(append([]byte{}, b[:i]...), new...), b[i+len(old):]...)
}

func flipBit(b []byte, i int, mask byte) []byte {
	b = bytes.Clone(b)
	b[i] ^= mask
	return b
}

// padTo3 appends JSON white space until len(b) % 3 != 0, so that the
// padded base64 of b ends in '='.
func padTo3(b []byte) []byte {
	for len(b)%3 == 0 {
		b = append(b, ' ')
	}
	return b
}

// ---- the vectors ----

func (g *gen) cases() {
	g.valid()
	g.freshness()
	g.audienceTrust()
	g.jwsForm()
	g.coseForm()
	g.payloads()
	g.order()
	g.handoffShape()
	g.chains()
	g.chainFaults()
	g.bounds()
	g.sequences()
	g.edges()
	g.policies()
	g.absentD7()
}

// absentD7 applies D7 as amended (issue 13) to the Handoffs that decode
// as a map without a chain member but break the CDDL (no offer, an offer
// of the wrong type or form, an offer that fails step 1): "absent",
// whatever else is wrong with them. Each was written as a step-1
// rejection with "unchecked" by the helper that builds its family; the
// list names them here once rather than at each call.
func (g *gen) absentD7() {
	names := map[string]bool{}
	for _, n := range []string{
		"cose-text-base64-padded-in-json", "edge-offer-cose-text-with-newline", "edge-offer-crlf-only-cbor",
		"edge-offer-newline-only", "handoff-cbor-cose-as-text", "handoff-cbor-int-key", "handoff-no-offer",
		"handoff-no-offer-cbor", "handoff-offer-array", "handoff-offer-bstr-tagged-cbor", "handoff-offer-empty-string",
		"handoff-offer-jws-with-spaces", "handoff-offer-not-base64url", "handoff-offer-null", "handoff-offer-number",
		"handoff-offer-number-cbor", "handoff-offer-object", "handoff-offer-two-part-text", "jws-alg-none-unsigned",
		"jws-four-parts", "jws-json-serialization", "jws-padding-header", "jws-padding-payload",
		"jws-padding-signature", "jws-standard-alphabet", "jws-two-parts", "jws-whitespace-inside",
	} {
		names[n] = true
	}
	for _, v := range g.vectors {
		if !names[v.out.Name] {
			continue
		}
		e := &v.out.Expected
		if e.Result != "rejected" || e.Chain != "unchecked" || bytes.Contains(v.data, []byte(`"chain"`)) || bytes.Contains(v.data, []byte("echain")) {
			panic("absentD7: " + v.out.Name + " is not a step-1 rejection of a Handoff without chain")
		}
		e.Chain = "absent"
		v.out.Rule += "; D7 as amended: a Handoff map without chain is absent"
		delete(names, v.out.Name)
	}
	if len(names) != 0 {
		panic(fmt.Sprintf("absentD7: no vectors named %v", names))
	}
}

func (g *gen) valid() {
	g.category = "valid"
	coder := g.agents["coder"]

	e := g.single("valid-jws-in-json", fJWS, nil)
	if err := checkJWS(e, &coder.key.PublicKey); err != nil {
		panic(err)
	}
	g.h("valid-jws-in-json", "draft Signing/JWS; SPEC 1, 2", false, e, nil).accept("absent")
	e = g.single("valid-cose-in-json", fCOSE, nil)
	if err := checkCOSE(e, &coder.key.PublicKey); err != nil {
		panic(err)
	}
	g.h("valid-cose-in-json", "draft Signing/COSE: base64url COSE_Sign1 in a JSON Handoff", false, e, nil).accept("absent")
	g.h("valid-jws-in-cbor", "draft Signing: a JWS is text in a CBOR Handoff", true, g.single("valid-jws-in-cbor", fJWS, nil), nil).accept("absent")
	g.h("valid-cose-in-cbor", "draft Signing/COSE: tagged COSE_Sign1 bstr in a CBOR Handoff", true, g.single("valid-cose-in-cbor", fCOSE, nil), nil).accept("absent")
	g.h("valid-cose-gocose-in-cbor", "SPEC 2: a COSE_Sign1 as veraison/go-cose writes it", true,
		coder.goCOSE(toCBOR(g.offer("valid-cose-gocose-in-cbor", nil))), nil).accept("absent")

	all := func(o *obj) {
		o.set("task", "task-0c9e").set("obo", newObj("sub", "user-1234", "iss", "https://idp.example", "x-extra", 7))
		o.set("grant", dig([]byte("Bearer abc")))
		o.set("refs", []any{
			ref("digest", "ctx").add("loc", "https://store.example/ctx/1"),
			ref("salted-digest", "salt+ctx"),
			ref("https://kinds.example/my-kind", "k").add("proof", newObj("any", []any{1, "two", nil})),
			ref("urn:example:kind", "u").add("x-ref-extra", true),
		})
	}
	g.h("valid-all-members-jws-json", "SPEC 1: every optional member, unknown members kept and ignored", false,
		g.single("valid-all-members-jws-json", fJWS, func(o *obj) {
			all(o)
			o.add("x-unknown", newObj("nested", []any{1.5, nil, true, "s"})).add("x-number", raw{j: "1e3"}).add("x-neg", -5)
		}), nil).accept("absent")
	g.h("valid-all-members-cose-cbor", "SPEC 1, D3: unknown CBOR members may hold any well-formed CBOR, tags included", true,
		g.single("valid-all-members-cose-cbor", fCOSE, func(o *obj) {
			all(o)
			o.add("x-tagged", raw{c: cTag(1, cUint(1767225600))}).add("x-bytes", bs{1, 2, 3}).add("x-float", 1.5).
				add("x-neg", -5).add("x-uri", raw{c: cTag(32, cText("https://x.example"))}).
				add("x-intkey-map", raw{c: cMap(cUint(1), cText("one"))})
		}), nil).accept("absent")

	c := g.agents["coder"]
	hdr := func(h string) func(*obj) elem {
		return func(o *obj) elem { return jwsRaw(c.key, h, toJSON(o)) }
	}
	for _, tc := range []struct{ name, header string }{
		{"valid-jws-typ-uppercase", `{"alg":"ES256","kid":"` + c.kid + `","typ":"AGENT-HANDOFF+JWT"}`},
		{"valid-jws-typ-application-prefix", `{"alg":"ES256","kid":"` + c.kid + `","typ":"application/agent-handoff+jwt"}`},
		{"valid-jws-typ-application-mixed-case", `{"alg":"ES256","kid":"` + c.kid + `","typ":"Application/Agent-Handoff+JWT"}`},
		{"valid-jws-header-reordered", `{"typ":"agent-handoff+jwt","kid":"` + c.kid + `","alg":"ES256"}`},
		{"valid-jws-header-whitespace", "{ \"alg\" : \"ES256\",\n \"kid\":\"" + c.kid + "\", \"typ\":\"agent-handoff+jwt\" }"},
	} {
		g.h(tc.name, "D10: typ compares case-insensitively, with or without application/; header is JSON", false,
			hdr(tc.header)(g.offer(tc.name, nil)), nil).accept("absent")
	}

	g.h("valid-cose-content-type-case", "D3: the COSE content type compares ASCII case-insensitively", true,
		coseRaw(c.key, toCBOR(cmap{{cUint(1), cInt(-7)}, {cUint(3), cText("Application/Agent-Handoff+CBOR")}, {cUint(4), cBytes([]byte(c.kid))}}), nil,
			toCBOR(g.offer("valid-cose-content-type-case", nil))), nil).accept("absent")
	g.h("valid-cose-no-kid", "D10: COSE without kid: each key bound to iss is tried", true,
		g.single("valid-cose-no-kid", fCOSENoKid, nil), nil).accept("absent")
	g.h("valid-cose-no-kid-second-key", "D10: COSE without kid: the planner's second key verifies", true,
		g.agents["planner2"].coseNoKid(toCBOR(g.offer("valid-cose-no-kid-second-key", func(o *obj) { o.set("iss", P) }))), nil).accept("absent")
	g.h("valid-jws-second-key", "D10, SPEC 4: the kid selects among the keys bound to iss", false,
		g.agents["planner2"].jws(toJSON(g.offer("valid-jws-second-key", func(o *obj) { o.set("iss", P) }))), nil).accept("absent")
	g.h("valid-cose-kid-unprotected-ignored", "D10: COSE kid is read from the protected header only; an unprotected kid is ignored", true,
		coseRaw(c.key, toCBOR(coseProtNoKid()), toCBOR(cmap{{cUint(4), cBytes([]byte(g.agents["outsider"].kid))}}),
			toCBOR(g.offer("valid-cose-kid-unprotected-ignored", nil))), nil).accept("absent")

	// Non-preferred integer encodings are accepted (D3).
	np := g.offer("valid-cbor-nonpreferred-ints", nil)
	np.set("v", raw{c: []byte{0x18, 0x01}}).
		set("iat", raw{c: append([]byte{0x1b}, u64(uint64(now-30))...)}).
		set("exp", raw{c: append([]byte{0x1a}, u32(uint32(now+210))...)})
	g.h("valid-cbor-nonpreferred-ints", "D3: non-preferred (non-minimal) CBOR integer encodings are accepted", true, c.cose(toCBOR(np)), nil).accept("absent")

	g.h("valid-json-escaped-strings", "SPEC 1: members compare as decoded text (JSON escapes)", false,
		g.single("valid-json-escaped-strings", fJWS, func(o *obj) {
			o.set("iss", raw{j: `"https:\/\/coder.example"`}).set("aud", raw{j: `"https://\u0074ester.example"`})
		}), nil).accept("absent")
	g.h("valid-iss-unicode-dialog", "SPEC 1: dialog is any text", false,
		g.single("valid-iss-unicode-dialog", fJWS, func(o *obj) { o.set("dialog", "контекст-☃") }), nil).accept("absent").dialog("контекст-☃")

	e = g.single("valid-handoff-leading-whitespace", fJWS, nil)
	g.newV("valid-handoff-leading-whitespace", "SPEC 4: JSON by content; JSON white space around the Handoff", "json",
		append([]byte(" \t\r\n"), append(toJSON(handoffTree(e, nil)), '\n', ' ')...)).accept("absent").offerDigest(e.octets)

	e = g.single("valid-handoff-unknown-member-json", fJWS, nil)
	g.newV("valid-handoff-unknown-member-json", "SPEC 1: Handoff * text => any (unknown members, not signed)", "json",
		toJSON(newObj("x-note", newObj("a", []any{1, 2}), "offer", e))).accept("absent").offerDigest(e.octets)
	e = g.single("valid-handoff-unknown-member-cbor", fCOSE, nil)
	g.newV("valid-handoff-unknown-member-cbor", "SPEC 1: Handoff * text => any (unknown members, not signed)", "cbor",
		toCBOR(newObj("offer", e, "x-note", raw{c: cTag(1, cUint(5))}))).accept("absent").offerDigest(e.octets)

	g.h("valid-prev-without-chain", "D7: an offer with prev and no chain member is accepted, chain absent", false,
		g.single("valid-prev-without-chain", fJWS, func(o *obj) { o.set("prev", dig([]byte("earlier offer"))) }), nil).accept("absent")
	g.h("valid-prev-unknown-alg-without-chain", "D6: the prev alg matters only to a chain check", false,
		g.single("valid-prev-unknown-alg-without-chain", fJWS, func(o *obj) {
			o.set("prev", newObj("alg", "sha-512", "val", b64.EncodeToString(bytes.Repeat([]byte{7}, 64))))
		}), nil).accept("absent")
	g.h("valid-no-prev-require-full-chain", "D7: an offer with no prev starts the chain and passes require-full-chain with quality absent", false,
		g.single("valid-no-prev-require-full-chain", fJWS, nil), nil).accept("absent").full()
	g.h("valid-dialog-match", "draft step 5: dialog equals the host message's dialog", false,
		g.single("valid-dialog-match", fJWS, nil), nil).accept("absent").dialog(dialogID)
	g.h("valid-grant-unknown-alg", "SPEC 1: Digest alg is sha-256 / text; only sha-256 fixes the val length", false,
		g.single("valid-grant-unknown-alg", fJWS, func(o *obj) {
			o.set("grant", newObj("alg", "x-hash", "val", "AAAA"))
		}), nil).accept("absent")
	g.h("valid-digest-member-order", "SPEC 1: Digest is a map; member order is free", false,
		g.single("valid-digest-member-order", fJWS, func(o *obj) {
			o.set("grant", newObj("val", b64.EncodeToString(sha([]byte("g"))), "alg", "sha-256"))
		}), nil).accept("absent")
	g.h("valid-ref-kind-uris", "draft Context References: any other kind is an absolute URI", false,
		g.single("valid-ref-kind-uris", fJWS, func(o *obj) {
			o.set("refs", []any{ref("tag:example.com,2026:kind", "a"), ref("urn:ietf:params:x", "b"), ref("https://kinds.example/k?q=1", "c"), ref("scitt-receipt", "d"), ref("learnlog-head", "e")})
		}), nil).accept("absent")
	g.h("valid-hop-long", "SPEC 1: hop is at least 128 bits; longer is fine", false,
		g.single("valid-hop-long", fJWS, func(o *obj) { o.set("hop", b64.EncodeToString(bytes.Repeat([]byte{0xab}, 32))) }), nil).accept("absent")
	g.h("valid-iss-is-receiver", "D8: no chain, no cycle: an offer from the receiver to itself", false,
		g.agents["tester"].jws(toJSON(g.offer("valid-iss-is-receiver", func(o *obj) { o.set("iss", T) }))), nil).accept("absent")
}

func u64(n uint64) []byte {
	b := make([]byte, 8)
	for i := 7; i >= 0; i-- {
		b[i] = byte(n)
		n >>= 8
	}
	return b
}

func u32(n uint32) []byte { return u64(uint64(n))[4:] }
