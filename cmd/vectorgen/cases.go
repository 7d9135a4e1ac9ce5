package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"regexp"
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

func (g *gen) freshness() {
	g.category = "stale"
	at := func(name, rule string, iat, exp int64, f form) *V {
		return g.h(name, rule, f != fJWS, g.single(name, f, func(o *obj) { o.set("iat", iat).set("exp", exp) }), nil)
	}
	at("stale-exp-equals-iat", "D4: exp <= iat", now-10, now-10, fJWS).reject("stale", "absent").at(-1, "")
	at("stale-exp-before-iat", "D4: exp <= iat", now+100, now+50, fJWS).reject("stale", "absent")
	at("stale-exp-equals-iat-cose", "D4: exp <= iat", now, now, fCOSE).reject("stale", "absent")
	at("stale-iat-future", "D4: iat > now + skew (60 s)", now+61, now+200, fJWS).reject("stale", "absent").at(-1, "iat")
	at("stale-iat-future-cose", "D4: iat > now + skew (60 s)", now+61, now+200, fCOSE).reject("stale", "absent")
	at("valid-iat-at-skew", "D4: iat = now + skew is not later than now + skew", now+60, now+200, fJWS).accept("absent")
	at("stale-expired", "D4: exp <= now", now-200, now, fJWS).reject("stale", "absent").at(-1, "exp")
	at("stale-expired-long-ago", "D4: exp <= now", now-100000, now-99900, fCOSE).reject("stale", "absent")
	at("valid-exp-now-plus-1", "D4: exp = now + 1 is later than now", now-200, now+1, fJWS).accept("absent")
	at("stale-lifetime-301", "D4: exp - iat > max lifetime (300 s)", now-1, now+300, fJWS).reject("stale", "absent")
	at("stale-lifetime-cose", "D4: exp - iat > max lifetime (300 s)", now-100, now+3600, fCOSE).reject("stale", "absent")
	at("valid-lifetime-300", "D4: exp - iat = max lifetime is allowed", now-1, now+299, fJWS).accept("absent")
	at("stale-lifetime-and-iat-zero", "D4: iat 0 is an integer; the lifetime is too long", 0, now+10, fJWS).reject("stale", "absent")
	// Time = uint: integers beyond int64 are valid CDDL and fail freshness.
	g.h("stale-iat-2pow63", "SPEC 1 Time = uint, D4: iat 2^63 is an integer far in the future", false,
		g.single("stale-iat-2pow63", fJWS, func(o *obj) {
			o.set("iat", raw{j: "9223372036854775808"}).set("exp", raw{j: "9223372036854775900"})
		}), nil).reject("stale", "absent")
	g.h("stale-exp-max-uint64-cbor", "SPEC 1 Time = uint, D4: exp 2^64-1 makes exp - iat exceed the max lifetime", true,
		g.single("stale-exp-max-uint64-cbor", fCOSE, func(o *obj) { o.set("exp", raw{c: cUint(1<<64 - 1)}) }), nil).reject("stale", "absent")
}

func (g *gen) audienceTrust() {
	g.category = "wrong-audience"
	g.h("wrong-audience", "draft step 2: aud equals the receiver's AgentId", false,
		g.single("wrong-audience", fJWS, func(o *obj) { o.set("aud", P) }), nil).reject("wrong-audience", "absent").at(-1, "aud")
	g.h("wrong-audience-cose", "draft step 2", true,
		g.single("wrong-audience-cose", fCOSE, func(o *obj) { o.set("aud", P) }), nil).reject("wrong-audience", "absent")
	g.h("wrong-audience-case", "draft step 2: AgentIds compare exactly", false,
		g.single("wrong-audience-case", fJWS, func(o *obj) { o.set("aud", "https://Tester.example") }), nil).reject("wrong-audience", "absent")
	g.h("wrong-audience-trailing-slash", "draft step 2: AgentIds compare exactly", false,
		g.single("wrong-audience-trailing-slash", fJWS, func(o *obj) { o.set("aud", T+"/") }), nil).reject("wrong-audience", "absent")
	g.h("wrong-audience-other-me", "draft step 2: the same offer at another receiver", false,
		g.single("wrong-audience-other-me", fJWS, nil), nil).reject("wrong-audience", "absent").me(P)

	g.category = "untrusted-key"
	out := g.agents["outsider"]
	g.h("untrusted-iss", "D1 (b): no key bound to iss", false,
		g.single("untrusted-iss", fJWS, func(o *obj) { o.set("iss", X) }), nil).reject("untrusted-key", "absent").at(-1, "")
	g.h("untrusted-iss-cose", "D1 (b): no key bound to iss", true,
		g.single("untrusted-iss-cose", fCOSE, func(o *obj) { o.set("iss", X) }), nil).reject("untrusted-key", "absent")
	g.h("untrusted-iss-cose-no-kid", "D1 (b), D10: no key bound to iss, no kid", true,
		g.single("untrusted-iss-cose-no-kid", fCOSENoKid, func(o *obj) { o.set("iss", X) }), nil).reject("untrusted-key", "absent")
	g.h("untrusted-unknown-agent", "D1 (b): an AgentId absent from the trust file", false,
		g.single("untrusted-unknown-agent", fJWS, func(o *obj) { o.set("iss", "https://nobody.example") }), nil).reject("untrusted-key", "absent")
	g.h("untrusted-kid-not-bound-to-iss", "D1 (b), D10: no key bound to iss has the message's kid", false,
		out.jws(toJSON(g.offer("untrusted-kid-not-bound-to-iss", nil))), nil).reject("untrusted-key", "absent")
	g.h("untrusted-kid-not-bound-to-iss-cose", "D1 (b), D10: no key bound to iss has the message's kid", true,
		out.cose(toCBOR(g.offer("untrusted-kid-not-bound-to-iss-cose", nil))), nil).reject("untrusted-key", "absent")
	pl := g.agents["planner"]
	g.h("untrusted-kid-of-another-agent", "D1 (b), learning keys: a key trusted for another iss does not speak for this one", false,
		pl.jws(toJSON(g.offer("untrusted-kid-of-another-agent", nil))), nil).reject("untrusted-key", "absent")
	c := g.agents["coder"]
	g.h("bad-signature-right-kid-wrong-key", "D1 (c): the kid names a key of iss, another key signed", false,
		jwsRaw(out.key, jwsHeader(c.kid), toJSON(g.offer("bad-signature-right-kid-wrong-key", nil))), nil).reject("bad-signature", "absent").at(-1, "")
	g.h("bad-signature-cose-no-kid-wrong-key", "D1 (c), D10: keys bound to iss are tried; none verifies", true,
		out.coseNoKid(toCBOR(g.offer("bad-signature-cose-no-kid-wrong-key", nil))), nil).reject("bad-signature", "absent")
	g.h("bad-signature-cose-kid-of-planner-signed-by-planner2", "D1 (c): kid selects the planner's first key; its second key signed", true,
		coseRaw(g.agents["planner2"].key, toCBOR(coseProt(pl.kid)), nil, toCBOR(g.offer("bad-signature-cose-kid-of-planner-signed-by-planner2", func(o *obj) { o.set("iss", P) }))),
		nil).reject("bad-signature", "absent")
}

// jwsCompact is SPEC 1's JwsCompact.
var jwsCompact = regexp.MustCompile(`^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$`)

func (g *gen) jwsForm() {
	g.category = "jws-form"
	c := g.agents["coder"]
	// Text that is not even JwsCompact breaks the Handoff's CDDL (D3): a
	// malformed Handoff prints unchecked (D7); a JwsCompact whose header,
	// payload or signature is wrong is a bad element in a well-formed
	// Handoff: absent.
	bad := func(name, rule string, e elem) *V {
		if !jwsCompact.Match(e.octets) {
			return g.h(name, rule+"; D3, D7: not JwsCompact, so the Handoff is malformed: unchecked", false, e, nil).reject("bad-signature", "unchecked").at(-1, "")
		}
		return g.h(name, rule, false, e, nil).reject("bad-signature", "absent").at(-1, "")
	}
	pay := func(name string) []byte { return toJSON(g.offer(name, nil)) }

	// One character (or one bit) changed in each part.
	e := c.jws(pay("jws-flip-header-char"))
	h, p, s := jwsSplit(e)
	bad("jws-flip-header-char", "SPEC 2, D1: one base64url character of the header changed", jwsJoin(flipChar(h, 5), p, s))
	e = c.jws(pay("jws-flip-header-bit-still-valid"))
	h, p, s = jwsSplit(e)
	bad("jws-flip-header-bit-still-valid", "D1 (c): one bit of the header changed (typ case), header still valid: the signature fails",
		jwsJoin(reencodePart(h, func(b []byte) []byte { return replaceOnce(b, "agent-handoff", "Agent-handoff") }), p, s))
	e = c.jws(pay("jws-flip-payload-char"))
	h, p, s = jwsSplit(e)
	bad("jws-flip-payload-char", "D1: one base64url character of the payload changed", jwsJoin(h, flipChar(p, 10), s))
	e = c.jws(pay("jws-flip-payload-bit-still-valid"))
	h, p, s = jwsSplit(e)
	bad("jws-flip-payload-bit-still-valid", "D1 (c): one bit of the payload changed (in dialog), payload still valid: the signature fails",
		jwsJoin(h, reencodePart(p, func(b []byte) []byte { return replaceOnce(b, dialogID, "ctx-7f3a9c2g") }), s))
	e = c.jws(pay("jws-flip-signature-char"))
	h, p, s = jwsSplit(e)
	bad("jws-flip-signature-char", "D1 (c): one base64url character of the signature changed", jwsJoin(h, p, flipChar(s, 20)))
	e = c.jws(pay("jws-flip-signature-bit"))
	h, p, s = jwsSplit(e)
	bad("jws-flip-signature-bit", "D1 (c): the last bit of S changed", jwsJoin(h, p, reencodePart(s, func(b []byte) []byte { return flipBit(b, 63, 1) })))
	e = c.jws(pay("jws-signature-of-other-input"))
	h, p, _ = jwsSplit(e)
	_, _, s2 := jwsSplit(c.jws(pay("jws-signature-of-other-input-2")))
	bad("jws-signature-of-other-input", "D1 (c): a valid signature by the right key over other octets", jwsJoin(h, p, s2))

	hd := func(name, rule, header string) *V {
		return bad(name, rule, jwsRaw(c.key, header, pay(name)))
	}
	k := jsonString(c.kid)
	hd("jws-typ-jwt", "SPEC 2, D1 (a): typ must be agent-handoff+jwt", `{"alg":"ES256","kid":`+k+`,"typ":"JWT"}`)
	hd("jws-typ-missing", "draft Signing/JWS: the protected header MUST contain typ", `{"alg":"ES256","kid":`+k+`}`)
	hd("jws-typ-other-media-type", "D10: only agent-handoff+jwt, with or without application/", `{"alg":"ES256","kid":`+k+`,"typ":"text/agent-handoff+jwt"}`)
	hd("jws-typ-cbor", "D1 (a): typ names the JWS type, not the COSE content type", `{"alg":"ES256","kid":`+k+`,"typ":"application/agent-handoff+cbor"}`)
	hd("jws-typ-not-string", "D1 (a): typ is text", `{"alg":"ES256","kid":`+k+`,"typ":1}`)
	hd("jws-crit", "SPEC 2, D1 (a): no crit in the JWS header", `{"alg":"ES256","crit":["exp"],"exp":1,"kid":`+k+`,"typ":"agent-handoff+jwt"}`)
	hd("jws-crit-empty", "SPEC 2, D1 (a): no crit, even empty", `{"alg":"ES256","crit":[],"kid":`+k+`,"typ":"agent-handoff+jwt"}`)
	hd("jws-alg-none-with-signature", "SPEC 2: alg never none", `{"alg":"none","kid":`+k+`,"typ":"agent-handoff+jwt"}`)
	hd("jws-alg-es384-label", "D1 (a): alg allowed means ES256 only today", `{"alg":"ES384","kid":`+k+`,"typ":"agent-handoff+jwt"}`)
	hd("jws-alg-lowercase", "D1 (a): alg values are case-sensitive", `{"alg":"es256","kid":`+k+`,"typ":"agent-handoff+jwt"}`)
	hd("jws-alg-missing", "draft Signing/JWS: the protected header MUST contain alg", `{"kid":`+k+`,"typ":"agent-handoff+jwt"}`)
	hd("jws-kid-missing", "D10: JWS kid is required", `{"alg":"ES256","typ":"agent-handoff+jwt"}`)
	hd("jws-kid-empty", "D10: JWS kid is required", `{"alg":"ES256","kid":"","typ":"agent-handoff+jwt"}`)
	hd("jws-kid-number", "SPEC 2: kid is the thumbprint text", `{"alg":"ES256","kid":1,"typ":"agent-handoff+jwt"}`)
	hd("jws-header-duplicate-alg", "SPEC 2, D3: strict JSON, no duplicate member names", `{"alg":"ES256","alg":"ES256","kid":`+k+`,"typ":"agent-handoff+jwt"}`)
	hd("jws-header-array", "SPEC 2: the header is a JSON object", `["ES256"]`)
	hd("jws-header-trailing-data", "SPEC 2: the header is one JSON object", `{"alg":"ES256","kid":`+k+`,"typ":"agent-handoff+jwt"}{}`)

	// alg none with the empty signature part of an unsecured JWS.
	o := pay("jws-alg-none-unsigned")
	bad("jws-alg-none-unsigned", "SPEC 2: alg never none (unsecured JWS, empty signature part)",
		elem{octets: []byte(b64.EncodeToString([]byte(`{"alg":"none","kid":`+k+`,"typ":"agent-handoff+jwt"}`)) + "." + b64.EncodeToString(o) + ".")})
	// HS256 keyed with the coder's public JWK (the algorithm confusion attack).
	pubJWK := []byte(`{"crv":"P-256","kty":"EC","x":"` + b64.EncodeToString(c.key.PublicKey.X.FillBytes(make([]byte, 32))) + `","y":"` + b64.EncodeToString(c.key.PublicKey.Y.FillBytes(make([]byte, 32))) + `"}`)
	o = pay("jws-alg-hs256")
	in := b64.EncodeToString([]byte(`{"alg":"HS256","kid":`+k+`,"typ":"agent-handoff+jwt"}`)) + "." + b64.EncodeToString(o)
	bad("jws-alg-hs256", "SPEC 2, D2: never a MAC algorithm (HS256 keyed with the public key)",
		elem{octets: []byte(in + "." + b64.EncodeToString(hs256(pubJWK, []byte(in))))})
	// DER signature.
	o = pay("jws-der-signature")
	in = b64.EncodeToString([]byte(jwsHeader(c.kid))) + "." + b64.EncodeToString(o)
	bad("jws-der-signature", "SPEC 2: the ES256 signature is the 64-octet R||S form, not DER",
		elem{octets: []byte(in + "." + b64.EncodeToString(der(c.key, []byte(in))))})
	o = pay("jws-signature-zero")
	in = b64.EncodeToString([]byte(jwsHeader(c.kid))) + "." + b64.EncodeToString(o)
	bad("jws-signature-zero", "D1 (c): R = S = 0", elem{octets: []byte(in + "." + b64.EncodeToString(make([]byte, 64)))})
	e = c.jws(pay("jws-signature-63-octets"))
	h, p, s = jwsSplit(e)
	bad("jws-signature-63-octets", "SPEC 2: 64-octet R||S", jwsJoin(h, p, reencodePart(s, func(b []byte) []byte { return b[:63] })))
	e = c.jws(pay("jws-signature-65-octets"))
	h, p, s = jwsSplit(e)
	bad("jws-signature-65-octets", "SPEC 2: 64-octet R||S", jwsJoin(h, p, reencodePart(s, func(b []byte) []byte { return append(b, 0) })))

	// Padding and non-canonical base64url (D3), each signed over exactly
	// the octets carried, so only the encoding is wrong.
	pad := base64.URLEncoding
	o = padTo3(pay("jws-padding-payload"))
	hB, pB := b64.EncodeToString([]byte(jwsHeader(c.kid))), pad.EncodeToString(o)
	bad("jws-padding-payload", "D3: base64url with padding", elem{octets: []byte(jwsParts(c.key, hB, pB))})
	hdrPadded := padTo3([]byte(jwsHeader(c.kid)))
	hB, pB = pad.EncodeToString(hdrPadded), b64.EncodeToString(pay("jws-padding-header"))
	bad("jws-padding-header", "D3: base64url with padding", elem{octets: []byte(jwsParts(c.key, hB, pB))})
	e = c.jws(pay("jws-padding-signature"))
	h, p, s = jwsSplit(e)
	bad("jws-padding-signature", "D3: base64url with padding", jwsJoin(h, p, s+"=="))
	e = c.jws(pay("jws-noncanonical-signature"))
	h, p, s = jwsSplit(e)
	bad("jws-noncanonical-signature", "D3: base64url with non-canonical trailing bits", jwsJoin(h, p, s[:len(s)-1]+noncanon(s[len(s)-1])))
	e = c.jws(pay("jws-standard-alphabet"))
	h, p, s = jwsSplit(e)
	std := strings.NewReplacer("-", "+", "_", "/")
	s3 := s
	for !strings.ContainsAny(s3, "-_") { // make sure the swap changes something
		e = c.jws(pay("jws-standard-alphabet"))
		h, p, s3 = jwsSplit(e)
	}
	bad("jws-standard-alphabet", "SPEC 1 B64u: [A-Za-z0-9_-] only", jwsJoin(h, p, std.Replace(s3)))
	e = c.jws(pay("jws-two-parts"))
	h, p, _ = jwsSplit(e)
	bad("jws-two-parts", "SPEC 1 JwsCompact: three parts", elem{octets: []byte(h + "." + p)})
	e = c.jws(pay("jws-four-parts"))
	bad("jws-four-parts", "SPEC 1 JwsCompact: three parts", elem{octets: append(e.octets, ".AAAA"...)})
	e = c.jws(pay("jws-json-serialization"))
	h, p, s = jwsSplit(e)
	g.newV("jws-json-serialization", "draft Signing/JWS: the compact serialization, not the JSON one", "json",
		toJSON(newObj("offer", newObj("protected", h, "payload", p, "signature", s)))).reject("bad-signature", "unchecked").nullOffer()
	e = c.jws(pay("jws-whitespace-inside"))
	h, p, s = jwsSplit(e)
	bad("jws-whitespace-inside", "SPEC 1 JwsCompact: no white space inside", elem{octets: []byte(h + ".\n" + p + "." + s)})
	bad("jws-payload-not-json", "D1 (a): the payload decodes (D3)", c.jws([]byte("hello, world")))
	bad("jws-payload-empty-object", "D1 (a): v and type missing", c.jws([]byte("{}")))
}

// noncanon returns the base64url character for the value of c with its
// low bit set (the last character of 64 octets carries 4 bits + 2 zero bits).
func noncanon(c byte) string {
	const alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	v := strings.IndexByte(alpha, c)
	return string(alpha[v|1])
}

func (g *gen) coseForm() {
	g.category = "cose-form"
	c := g.agents["coder"]
	bad := func(name, rule string, e elem) *V {
		return g.h(name, rule, true, e, nil).reject("bad-signature", "absent").at(-1, "")
	}
	pay := func(name string) []byte { return toCBOR(g.offer(name, nil)) }
	std := toCBOR(coseProt(c.kid))
	signed := func(prot, payload []byte) []byte { return rs(c.key, sigStructure(prot, payload)) }

	// One bit flipped in each part, the message still well-formed.
	o := pay("cose-flip-protected-bit-still-valid")
	flipped := replaceOnce(std, "application", "Application")
	bad("cose-flip-protected-bit-still-valid", "D1 (c): one bit of the protected header changed (content type case, still valid): the signature fails",
		elem{cose: true, octets: coseMsg(flipped, cMap(), o, signed(std, o))})
	o = pay("cose-flip-protected-kid-byte")
	flipped = replaceOnce(std, c.kid[:4], flipChar(c.kid[:4], 1))
	g.h("cose-flip-protected-kid-byte", "D1 (b): a changed kid byte names no key of iss", true,
		elem{cose: true, octets: coseMsg(flipped, cMap(), o, signed(std, o))}, nil).reject("untrusted-key", "absent")
	o = pay("cose-flip-payload-bit-still-valid")
	bad("cose-flip-payload-bit-still-valid", "D1 (c): one bit of the payload changed (in dialog): the signature fails",
		elem{cose: true, octets: coseMsg(std, cMap(), replaceOnce(o, dialogID, "ctx-7f3a9c2g"), signed(std, o))})
	o = pay("cose-flip-signature-bit")
	bad("cose-flip-signature-bit", "D1 (c): one bit of the signature changed",
		elem{cose: true, octets: coseMsg(std, cMap(), o, flipBit(signed(std, o), 40, 0x10))})
	o = pay("cose-flip-tag-byte")
	m := coseMsg(std, cMap(), o, signed(std, o))
	bad("cose-flip-tag-byte", "D3: exactly one tag 18 (tag 19 here)", elem{cose: true, octets: flipBit(m, 0, 0x01)})
	o = pay("cose-flip-payload-byte-breaks-cbor")
	m = coseMsg(std, cMap(), o, signed(std, o))
	i := bytes.Index(m, o)
	bad("cose-flip-payload-byte-breaks-cbor", "D3: the payload is one map (its head byte changed)", elem{cose: true, octets: flipBit(m, i, 0x40)})

	hdr := func(name, rule string, prot cmap) *V {
		p := toCBOR(prot)
		return bad(name, rule, coseRaw(c.key, p, nil, pay(name)))
	}
	alg := [2][]byte{cUint(1), cInt(-7)}
	ct := [2][]byte{cUint(3), cText(coseCT)}
	kid := [2][]byte{cUint(4), cBytes([]byte(c.kid))}
	hdr("cose-content-type-wrong", "SPEC 2: content type application/agent-handoff+cbor", cmap{alg, {cUint(3), cText("application/cbor")}, kid})
	hdr("cose-content-type-missing", "draft Signing/COSE: the protected header MUST contain content type", cmap{alg, kid})
	hdr("cose-content-type-integer", "D3: an integer content format is malformed", cmap{alg, {cUint(3), cUint(60)}, kid})
	hdr("cose-content-type-jwt", "SPEC 2: the COSE content type, not the JWS typ", cmap{alg, {cUint(3), cText("application/agent-handoff+jwt")}, kid})
	hdr("cose-crit", "D1 (a): a COSE crit (protected label 2) is bad-signature", cmap{alg, {cUint(2), cArray(cUint(4))}, ct, kid})
	hdr("cose-crit-private-label", "D1 (a): a COSE crit (protected label 2) is bad-signature", cmap{alg, {cUint(2), cArray(cInt(-65537))}, ct, kid, {cInt(-65537), cUint(1)}})
	hdr("cose-alg-es384", "D1 (a): alg allowed is -7 only today", cmap{{cUint(1), cInt(-35)}, ct, kid})
	hdr("cose-alg-eddsa", "D1 (a): alg allowed is -7 only today", cmap{{cUint(1), cInt(-8)}, ct, kid})
	hdr("cose-alg-hmac", "SPEC 2: never a MAC algorithm (HMAC 256/256 = 5)", cmap{{cUint(1), cUint(5)}, ct, kid})
	hdr("cose-alg-missing", "draft Signing/COSE: the protected header MUST contain alg", cmap{ct, kid})
	hdr("cose-alg-text", "D1 (a): alg is -7", cmap{{cUint(1), cText("ES256")}, ct, kid})
	hdr("cose-kid-text", "SPEC 2: kid (label 4) is a byte string: the UTF-8 octets of the thumbprint", cmap{alg, ct, {cUint(4), cText(c.kid)}})
	hdr("cose-protected-duplicate-label", "D3: well-formed, duplicate-free CBOR", cmap{alg, alg, ct, kid})

	unprot := func(name, rule string, prot cmap, un cmap) *V {
		return bad(name, rule, coseRaw(c.key, toCBOR(prot), toCBOR(un), pay(name)))
	}
	unprot("cose-content-type-unprotected-only", "SPEC 2: content type in the protected header", cmap{alg, kid}, cmap{ct})
	unprot("cose-alg-unprotected-only", "SPEC 2: alg in the protected header", cmap{ct, kid}, cmap{alg})

	o = pay("cose-untagged")
	bad("cose-untagged", "D3: a COSE message is exactly one tag 18 around the array",
		elem{cose: true, octets: coseMsg(std, cMap(), o, signed(std, o))[1:]})
	o = pay("cose-double-tag")
	bad("cose-double-tag", "D3: exactly one tag 18", elem{cose: true, octets: append([]byte{0xd2}, coseMsg(std, cMap(), o, signed(std, o))...)})
	o = pay("cose-tag-98")
	bad("cose-tag-98", "D3: tag 18 (COSE_Sign1), not 98 (COSE_Sign)",
		elem{cose: true, octets: cTag(98, coseMsg(std, cMap(), o, signed(std, o))[1:])})
	o = pay("cose-der-signature")
	bad("cose-der-signature", "SPEC 2: the ES256 signature is R||S, not DER",
		elem{cose: true, octets: coseMsg(std, cMap(), o, der(c.key, sigStructure(std, o)))})
	o = pay("cose-signature-63-octets")
	bad("cose-signature-63-octets", "SPEC 2: 64-octet R||S", elem{cose: true, octets: coseMsg(std, cMap(), o, signed(std, o)[:63])})
	o = pay("cose-signature-empty")
	bad("cose-signature-empty", "SPEC 2: 64-octet R||S", elem{cose: true, octets: coseMsg(std, cMap(), o, nil)})
	o = pay("cose-detached-payload")
	bad("cose-detached-payload", "SPEC 2: the payload is carried",
		elem{cose: true, octets: cTag(18, cArray(cBytes(std), cMap(), []byte{0xf6}, cBytes(signed(std, o))))})
	o = pay("cose-trailing-byte")
	bad("cose-trailing-byte", "D3: exactly one tag 18 around the array, nothing after it",
		elem{cose: true, octets: append(coseMsg(std, cMap(), o, signed(std, o)), 0x00)})
	o = pay("cose-array-5")
	bad("cose-array-5", "SPEC 2: COSE_Sign1 is a four-element array",
		elem{cose: true, octets: cTag(18, cArray(cBytes(std), cMap(), cBytes(o), cBytes(signed(std, o)), cUint(0)))})
	o = pay("cose-array-3")
	bad("cose-array-3", "SPEC 2: COSE_Sign1 is a four-element array",
		elem{cose: true, octets: cTag(18, cArray(cBytes(std), cBytes(o), cBytes(signed(std, o))))})
	o = pay("cose-protected-empty")
	bad("cose-protected-empty", "SPEC 2: alg and content type in the protected header",
		elem{cose: true, octets: coseMsg(nil, cMap(), o, rs(c.key, sigStructure(nil, o)))})
	o = pay("cose-protected-not-map")
	notMap := cArray(cUint(1), cInt(-7))
	bad("cose-protected-not-map", "SPEC 2: the protected header is a map", elem{cose: true, octets: coseMsg(notMap, cMap(), o, rs(c.key, sigStructure(notMap, o)))})
	o = pay("cose-unprotected-not-map")
	bad("cose-unprotected-not-map", "SPEC 2: the unprotected header is a map", elem{cose: true, octets: coseMsg(std, cArray(), o, signed(std, o))})
	bad("cose-payload-json", "D1 (a): a COSE payload is CBOR", c.cose(toJSON(g.offer("cose-payload-json", nil))))
	bad("cose-payload-offer-in-array", "D3: the payload is the Offer map", c.cose(cArray(pay("cose-payload-offer-in-array"))))
	g.newV("cose-text-base64-padded-in-json", "D3: base64url with padding is not B64u; SPEC 4: offer null when the base64url does not decode", "json",
		toJSON(newObj("offer", base64.URLEncoding.EncodeToString(padTo3(g.single("cose-text-base64-padded-in-json", fCOSE, nil).octets))))).
		reject("bad-signature", "unchecked").nullOffer()
}

// pv registers a payload violation: a correctly signed offer whose payload
// breaks the data model (D3): bad-signature at the offer, member named.
func (g *gen) pv(name, rule, member string, f form, mut func(*obj)) *V {
	e := g.single(name, f, mut)
	return g.h(name, rule, f != fJWS, e, nil).reject("bad-signature", "absent").at(-1, member)
}

func (g *gen) payloads() {
	g.category = "payload"
	J, K := fJWS, fCOSE
	g.pv("payload-v-2", "D1 (a): v = 1", "v", J, func(o *obj) { o.set("v", 2) })
	g.pv("payload-v-2-cose", "D1 (a): v = 1", "v", K, func(o *obj) { o.set("v", 2) })
	g.pv("payload-v-1.0", "D3: v 1.0 is malformed in JSON", "v", J, func(o *obj) { o.set("v", raw{j: "1.0"}) })
	g.pv("payload-v-1e0", "D3: v 1e0 is malformed in JSON", "v", J, func(o *obj) { o.set("v", raw{j: "1e0"}) })
	g.pv("payload-v-string", "SPEC 1: v is the integer 1", "v", J, func(o *obj) { o.set("v", "1") })
	g.pv("payload-v-missing", "SPEC 1: v is required", "v", J, func(o *obj) { o.del("v") })
	g.pv("payload-v-float-cbor", "D3: in CBOR a float is malformed", "v", K, func(o *obj) { o.set("v", raw{c: []byte{0xf9, 0x3c, 0x00}}) })
	g.pv("payload-v-true", "SPEC 1: v is the integer 1", "v", J, func(o *obj) { o.set("v", true) })
	g.pv("payload-type-status", "D1 (a): type = offer", "type", J, func(o *obj) { o.set("type", "status") })
	g.pv("payload-type-missing", "SPEC 1: type is required", "type", J, func(o *obj) { o.del("type") })
	g.pv("payload-type-case", "D1 (a): type = offer exactly", "type", K, func(o *obj) { o.set("type", "Offer") })
	g.pv("payload-iat-float", "D3: iat not an integer", "iat", J, func(o *obj) { o.set("iat", raw{j: fmt.Sprintf("%d.5", now-30)}) })
	g.pv("payload-iat-1e3", "D3: 1e3 is malformed in JSON", "iat", J, func(o *obj) { o.set("iat", raw{j: "1e3"}) })
	g.pv("payload-iat-exponent-exact", "D3: an exponent literal is malformed even when its value is an integer", "iat", J,
		func(o *obj) { o.set("iat", raw{j: "1.76722557E9"}) })
	g.pv("payload-iat-negative-zero", "D3: -0 is malformed in JSON", "iat", J, func(o *obj) { o.set("iat", raw{j: "-0"}) })
	g.pv("payload-iat-zero-fraction", "D3: 1.0-style literals are malformed", "iat", J, func(o *obj) { o.set("iat", raw{j: fmt.Sprintf("%d.0", now-30)}) })
	g.pv("payload-iat-negative", "SPEC 1: Time = uint", "iat", J, func(o *obj) { o.set("iat", -5) })
	g.pv("payload-iat-string", "SPEC 1: Time = uint", "iat", J, func(o *obj) { o.set("iat", fmt.Sprint(now-30)) })
	g.pv("payload-iat-beyond-uint64", "SPEC 1: Time = uint (64-bit); 2^64 is no Time", "iat", J, func(o *obj) { o.set("iat", raw{j: "18446744073709551616"}) })
	g.pv("payload-exp-missing", "SPEC 1: exp is required", "exp", J, func(o *obj) { o.del("exp") })
	g.pv("payload-exp-null", "SPEC 1: exp is a Time", "exp", J, func(o *obj) { o.set("exp", nil) })
	g.pv("payload-iat-float-cbor", "D3: in CBOR a float is malformed", "iat", K, func(o *obj) { o.set("iat", float64(now-30)) })
	g.pv("payload-iat-float16-cbor", "D3: in CBOR a float is malformed", "iat", K, func(o *obj) { o.set("iat", raw{c: []byte{0xf9, 0x00, 0x00}}) })
	g.pv("payload-iat-negative-cbor", "SPEC 1: Time = uint (major type 0)", "iat", K, func(o *obj) { o.set("iat", raw{c: cInt(-1)}) })
	g.pv("payload-iat-tag1-cbor", "D3: members this CDDL defines carry no tags", "iat", K, func(o *obj) { o.set("iat", raw{c: cTag(1, cUint(uint64(now-30)))}) })
	g.pv("payload-iat-bignum-cbor", "D3: members carry no tags (a bignum is tag 2)", "iat", K, func(o *obj) { o.set("iat", raw{c: cTag(2, cBytes(u32(uint32(now-30))))}) })
	g.pv("payload-hop-tagged-cbor", "D3: members this CDDL defines carry no tags", "hop", K,
		func(o *obj) { o.set("hop", raw{c: cTag(21, cText(o.get("hop").(string)))}) })
	g.pv("payload-dialog-bytes-cbor", "SPEC 1: dialog is text (not a byte string)", "dialog", K, func(o *obj) { o.set("dialog", bs(dialogID)) })
	g.pv("payload-iss-bytes-cbor", "SPEC 1: iss is text", "iss", K, func(o *obj) { o.set("iss", bs(C)) })
	g.pv("payload-grant-val-bytes-cbor", "SPEC 1: Digest val is B64u text", "grant", K,
		func(o *obj) { o.set("grant", newObj("alg", "sha-256", "val", bs(sha([]byte("g"))))) })

	g.pv("payload-duplicate-key-same-value", "D3: duplicate member names are malformed (JSON)", "", J, func(o *obj) { o.add("iss", C) })
	g.pv("payload-duplicate-key-aud", "D3: duplicate member names are malformed (JSON)", "", J, func(o *obj) { o.add("aud", P) })
	g.pv("payload-duplicate-key-cose", "D3: CBOR payloads are free of duplicate keys", "", K, func(o *obj) { o.add("aud", T) })
	g.pv("payload-duplicate-key-unknown-member", "D3: duplicate keys are malformed even in unknown members", "", J, func(o *obj) { o.add("x", 1).add("x", 1) })
	g.pv("payload-hop-short", "D3: hop shorter than 16 octets", "hop", J, func(o *obj) { o.set("hop", b64.EncodeToString(bytes.Repeat([]byte{1}, 15))) })
	g.pv("payload-hop-short-cose", "D3: hop shorter than 16 octets", "hop", K, func(o *obj) { o.set("hop", "AAAA") })
	g.pv("payload-hop-padding", "D3: base64url with padding", "hop", J, func(o *obj) { o.set("hop", base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{2}, 16))) })
	g.pv("payload-hop-noncanonical", "D3: base64url with non-canonical bits", "hop", J, func(o *obj) {
		h := b64.EncodeToString(bytes.Repeat([]byte{3}, 16)) // 22 chars; the last carries 2 bits
		o.set("hop", h[:21]+noncanon(h[21]))
	})
	g.pv("payload-hop-standard-alphabet", "SPEC 1 B64u: [A-Za-z0-9_-]", "hop", J, func(o *obj) { o.set("hop", "+/+/+/+/+/+/+/+/+/+/+/") })
	g.pv("payload-hop-empty", "SPEC 1 B64u: not empty", "hop", J, func(o *obj) { o.set("hop", "") })
	g.pv("payload-hop-number", "SPEC 1: hop is B64u text", "hop", J, func(o *obj) { o.set("hop", 1234567890) })
	g.pv("payload-hop-missing", "SPEC 1: hop is required", "hop", K, func(o *obj) { o.del("hop") })
	g.pv("payload-hop-whitespace", "SPEC 1 B64u: no white space", "hop", J, func(o *obj) { o.set("hop", " "+o.get("hop").(string)) })

	g.pv("payload-grant-extra-member", "SPEC 1, draft: Digest is closed (exactly alg and val)", "grant", J,
		func(o *obj) { o.set("grant", dig([]byte("g")).add("x", 1)) })
	g.pv("payload-prev-extra-member-cose", "SPEC 1: Digest is closed", "prev", K,
		func(o *obj) { o.set("prev", dig([]byte("p")).add("loc", "x")) })
	g.pv("payload-grant-missing-val", "D3: a Digest with a missing member", "grant", J, func(o *obj) { o.set("grant", newObj("alg", "sha-256")) })
	g.pv("payload-grant-missing-alg", "D3: a Digest with a missing member", "grant", J,
		func(o *obj) { o.set("grant", newObj("val", b64.EncodeToString(sha(nil)))) })
	g.pv("payload-grant-val-31", "D3: a sha-256 Digest whose val is not 32 octets", "grant", J,
		func(o *obj) { o.set("grant", newObj("alg", "sha-256", "val", b64.EncodeToString(sha(nil)[:31]))) })
	g.pv("payload-prev-val-33", "D3: a sha-256 Digest whose val is not 32 octets", "prev", J,
		func(o *obj) { o.set("prev", newObj("alg", "sha-256", "val", b64.EncodeToString(append(sha(nil), 0)))) })
	g.pv("payload-prev-val-hex", "D3: a sha-256 val is base64url, not hex", "prev", J,
		func(o *obj) { o.set("prev", newObj("alg", "sha-256", "val", fmt.Sprintf("%x", sha(nil)))) })
	g.pv("payload-grant-val-padding", "D3: base64url with padding", "grant", J,
		func(o *obj) {
			o.set("grant", newObj("alg", "sha-256", "val", base64.URLEncoding.EncodeToString(sha(nil))))
		})
	g.pv("payload-grant-not-map", "SPEC 1: grant is a Digest", "grant", J, func(o *obj) { o.set("grant", b64.EncodeToString(sha(nil))) })
	g.pv("payload-grant-val-empty-unknown-alg", "SPEC 1: B64u is not empty", "grant", J, func(o *obj) { o.set("grant", newObj("alg", "x-hash", "val", "")) })

	g.pv("payload-refs-empty", "D3: an empty refs array", "refs", J, func(o *obj) { o.set("refs", []any{}) })
	g.pv("payload-refs-empty-cose", "D3: an empty refs array", "refs", K, func(o *obj) { o.set("refs", []any{}) })
	g.pv("payload-refs-not-array", "SPEC 1: refs is an array", "refs", J, func(o *obj) { o.set("refs", ref("digest", "x")) })
	g.pv("payload-ref-kind-not-uri", "D3: a ContextRef kind neither listed nor an absolute URI", "refs[0]", J, func(o *obj) { o.set("refs", []any{ref("my-kind", "x")}) })
	g.pv("payload-ref-kind-relative", "D3: a relative reference is not an absolute URI", "refs[1]", J,
		func(o *obj) { o.set("refs", []any{ref("digest", "a"), ref("kinds/my-kind", "x")}) })
	g.pv("payload-ref-kind-fragment", "D3: an absolute-URI has no fragment (RFC 3986)", "refs[0]", J,
		func(o *obj) { o.set("refs", []any{ref("https://kinds.example/k#frag", "x")}) })
	g.pv("payload-ref-kind-case", "D3: listed kinds compare exactly; DIGEST is not a URI", "refs[0]", K, func(o *obj) { o.set("refs", []any{ref("DIGEST", "x")}) })
	g.pv("payload-ref-kind-space", "D3: a URI has no spaces", "refs[0]", J, func(o *obj) { o.set("refs", []any{ref("urn:a b", "x")}) })
	g.pv("payload-ref-kind-non-ascii", "D3: an RFC 3986 URI is ASCII (an IRI is not an absolute-URI)", "refs[0]", fJWS, func(o *obj) { o.set("refs", []any{ref("https://kinds.example/ké", "x")}) })
	g.pv("payload-ref-kind-bad-percent", "D3: RFC 3986 pct-encoded is % HEXDIG HEXDIG", "refs[0]", fJWS, func(o *obj) { o.set("refs", []any{ref("urn:example:%zz", "x")}) })
	g.pv("payload-ref-kind-bracket-in-path", "D3: RFC 3986 allows [ ] only in an IP-literal host", "refs[0]", fJWS, func(o *obj) { o.set("refs", []any{ref("https://kinds.example/a[1]", "x")}) })
	g.h("valid-ref-kind-scheme-only", "D3: RFC 3986 absolute-URI = scheme \":\" hier-part; an empty path is allowed", false,
		g.single("valid-ref-kind-scheme-only", fJWS, func(o *obj) { o.set("refs", []any{ref("x-kind:", "x")}) }), nil).accept("absent")
	g.pv("payload-ref-dig-missing", "SPEC 1: ContextRef dig is required", "refs[0]", J, func(o *obj) { o.set("refs", []any{newObj("kind", "digest")}) })
	g.pv("payload-ref-dig-extra-member", "SPEC 1: Digest is closed", "refs[0]", J, func(o *obj) { o.set("refs", []any{newObj("kind", "digest", "dig", dig(nil).add("x", "y"))}) })
	g.pv("payload-ref-kind-missing", "SPEC 1: ContextRef kind is required", "refs[0]", K, func(o *obj) { o.set("refs", []any{newObj("dig", dig(nil))}) })
	g.pv("payload-ref-loc-number", "SPEC 1: loc is text", "refs[0]", J, func(o *obj) { o.set("refs", []any{ref("digest", "x").add("loc", 5)}) })
	g.pv("payload-ref-not-map", "SPEC 1: a ContextRef is a map", "refs[0]", J, func(o *obj) { o.set("refs", []any{"digest"}) })

	g.pv("payload-dialog-missing", "D3: a missing required member (dialog)", "dialog", J, func(o *obj) { o.del("dialog") })
	g.pv("payload-dialog-missing-cose", "D3: a missing required member (dialog)", "dialog", K, func(o *obj) { o.del("dialog") })
	g.pv("payload-dialog-number", "D3: a member of the wrong type", "dialog", J, func(o *obj) { o.set("dialog", 7) })
	g.pv("payload-iss-missing", "D3: a missing required member (iss)", "iss", J, func(o *obj) { o.del("iss") })
	g.pv("payload-aud-missing", "D3: a missing required member (aud)", "aud", J, func(o *obj) { o.del("aud") })
	g.pv("payload-aud-array", "SPEC 1: aud is one AgentId (not a JWT audience array)", "aud", J, func(o *obj) { o.set("aud", []any{T}) })
	g.pv("payload-task-number", "D3: a member of the wrong type", "task", J, func(o *obj) { o.set("task", 5) })
	g.pv("payload-obo-no-sub", "SPEC 1: Principal sub is required", "obo", J, func(o *obj) { o.set("obo", newObj("iss", "https://idp.example")) })
	g.pv("payload-obo-string", "SPEC 1: obo is a Principal map", "obo", J, func(o *obj) { o.set("obo", "user-1234") })
	g.pv("payload-obo-sub-number", "SPEC 1: Principal sub is text", "obo", K, func(o *obj) { o.set("obo", newObj("sub", 1234)) })

	c := g.agents["coder"]
	rawp := func(name, rule string, f form, payload []byte) *V {
		var e elem
		if f == fJWS {
			e = c.jws(payload)
		} else {
			e = c.cose(payload)
		}
		return g.h(name, rule, f != fJWS, e, nil).reject("bad-signature", "absent").at(-1, "")
	}
	rawp("payload-json-array", "SPEC 1: the payload is an Offer map", J, toJSON([]any{g.offer("payload-json-array", nil)}))
	rawp("payload-json-trailing-data", "D3: one JSON value, nothing after it", J, append(toJSON(g.offer("payload-json-trailing-data", nil)), " {}"...))
	rawp("payload-json-invalid-utf8", "D3: JSON text is UTF-8", J, replaceOnce(toJSON(g.offer("payload-json-invalid-utf8", nil)), dialogID, "ctx-\xff\xfe"))
	rawp("payload-json-comment", "D3: strict JSON, no comments", J, replaceOnce(toJSON(g.offer("payload-json-comment", nil)), "{", "{/*c*/"))
	rawp("payload-json-single-quotes", "D3: strict JSON", J, replaceOnce(toJSON(g.offer("payload-json-single-quotes", nil)), `"dialog"`, `'dialog'`))
	rawp("payload-json-bom", "D3: strict JSON (no byte order mark)", J, append([]byte("\xef\xbb\xbf"), toJSON(g.offer("payload-json-bom", nil))...))
	rawp("payload-status-signed-as-offer", "D1 (a): a status is not an offer (type)", J, toJSON(newObj("v", 1, "type", "status", "offer", dig([]byte("x")),
		"iss", C, "aud", T, "iat", now-30, "state", "accepted")))
	rawp("payload-cbor-trailing-byte", "D3: one CBOR data item", K, append(toCBOR(g.offer("payload-cbor-trailing-byte", nil)), 0xf6))
	rawp("payload-cbor-truncated", "D3: well-formed CBOR", K, func() []byte { b := toCBOR(g.offer("payload-cbor-truncated", nil)); return b[:len(b)-3] }())
	ind := toCBOR(g.offer("payload-cbor-indefinite-map", nil))
	ind = append(append([]byte{0xbf}, ind[1:]...), 0xff)
	rawp("payload-cbor-indefinite-map", "D3: definite-length CBOR", K, ind)
	o := g.offer("payload-cbor-indefinite-text", nil)
	hopText := o.get("hop").(string)
	o.set("hop", raw{c: append(append(append([]byte{0x7f}, cText(hopText[:10])...), cText(hopText[10:])...), 0xff)})
	rawp("payload-cbor-indefinite-text", "D3: definite-length CBOR", K, toCBOR(o))
	o = g.offer("payload-cbor-int-key", nil)
	b := toCBOR(o)
	b = append(cHead(5, uint64(len(o.m)+1)), append(b[1:], append(cUint(1), cUint(1)...)...)...)
	rawp("payload-cbor-int-key", "SPEC 1: text keys in CBOR too", K, b)
	rawp("payload-cbor-invalid-utf8", "D3: well-formed CBOR (text is UTF-8)", K, replaceOnce(toCBOR(g.offer("payload-cbor-invalid-utf8", nil)), dialogID, "ctx-7f3a9c\xff\xfe"))
	rawp("payload-cbor-tagged-map", "SPEC 1: the payload is the Offer map (not a tagged one)", K, cTag(1234, toCBOR(g.offer("payload-cbor-tagged-map", nil))))
}

func (g *gen) order() {
	g.category = "check-order"
	out := g.agents["outsider"]
	g.h("order-malformed-before-untrusted", "D1: (a) payload checks run before any key is looked up (b)", false,
		out.jws(toJSON(g.offer("order-malformed-before-untrusted", func(o *obj) { o.set("iss", X).set("hop", "AAAA") }))), nil).
		reject("bad-signature", "absent").at(-1, "hop")
	g.h("order-crit-before-untrusted", "D1: (a) crit before (b)", false,
		jwsRaw(out.key, `{"alg":"ES256","crit":["b64"],"b64":true,"kid":"`+out.kid+`","typ":"agent-handoff+jwt"}`, toJSON(g.offer("order-crit-before-untrusted", func(o *obj) { o.set("iss", X) }))), nil).
		reject("bad-signature", "absent")
	g.h("order-cose-alg-before-untrusted", "D1: (a) alg allowed before (b)", true,
		coseRaw(out.key, toCBOR(cmap{{cUint(1), cInt(-35)}, {cUint(3), cText(coseCT)}, {cUint(4), cBytes([]byte(out.kid))}}), nil,
			toCBOR(g.offer("order-cose-alg-before-untrusted", func(o *obj) { o.set("iss", X) }))), nil).reject("bad-signature", "absent")
	g.h("order-untrusted-before-audience", "draft steps 1 then 2", false,
		g.single("order-untrusted-before-audience", fJWS, func(o *obj) { o.set("iss", X).set("aud", P) }), nil).reject("untrusted-key", "absent")
	g.h("order-untrusted-before-stale", "draft steps 1 then 3", true,
		g.single("order-untrusted-before-stale", fCOSE, func(o *obj) { o.set("iss", X).set("iat", now-1000).set("exp", now-900) }), nil).reject("untrusted-key", "absent")
	e := g.single("order-bad-signature-before-audience", fJWS, func(o *obj) { o.set("aud", P) })
	h, p, s := jwsSplit(e)
	g.h("order-bad-signature-before-audience", "D1 (c) then step 2", false, jwsJoin(h, p, flipChar(s, 3)), nil).reject("bad-signature", "absent")
	g.h("order-audience-before-stale", "draft steps 2 then 3", false,
		g.single("order-audience-before-stale", fJWS, func(o *obj) { o.set("aud", P).set("iat", now-1000).set("exp", now-900) }), nil).reject("wrong-audience", "absent")
	g.h("order-stale-before-dialog", "draft steps 3 then 5", false,
		g.single("order-stale-before-dialog", fJWS, func(o *obj) { o.set("iat", now-1000).set("exp", now-900) }), nil).reject("stale", "absent").dialog("another-dialog")
	g.h("order-refs-bound-before-key-lookup", "SPEC 4 Bounds: the refs count is checked while the payload is decoded, before any key is looked up", false,
		out.jws(toJSON(g.offer("order-refs-bound-before-key-lookup", func(o *obj) { o.set("iss", X).set("refs", manyRefs(65)) }))), nil).
		reject("policy", "absent").at(-1, "refs")
}

func manyRefs(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = ref("digest", fmt.Sprint(i))
	}
	return out
}

func (g *gen) handoffShape() {
	g.category = "handoff"
	e := g.single("handoff-offer", fJWS, nil)
	ec := g.single("handoff-offer-cose", fCOSE, nil)
	bad := func(v *V) *V { return v.reject("bad-signature", "unchecked") }

	bad(g.raw("handoff-no-offer", "D3: a Handoff without offer", "json", []byte(`{}`))).at(-1, "offer")
	bad(g.raw("handoff-no-offer-with-chain", "D3: a Handoff without offer", "json", toJSON(newObj("chain", []any{e})))).at(-1, "offer")
	bad(g.raw("handoff-no-offer-cbor", "D3: a Handoff without offer", "cbor", toCBOR(newObj("x", 1))))
	bad(g.h("handoff-empty-chain", "D3: an empty chain array", false, e, []any{})).at(-1, "chain")
	bad(g.h("handoff-empty-chain-cbor", "D3: an empty chain array", true, ec, []any{})).at(-1, "chain")
	bad(g.h("handoff-chain-of-numbers", "D3: chain is a non-empty array of text (JSON)", false, e, []any{1, 2})).at(-1, "chain")
	bad(g.h("handoff-chain-of-numbers-cbor", "D3: chain is an array of text / byte strings (CBOR)", true, ec, []any{1})).at(-1, "chain")
	bad(g.newV("handoff-chain-not-array", "D3: chain is an array", "json", toJSON(newObj("offer", e, "chain", string(e.octets))))).offerDigest(e.octets).at(-1, "chain")
	bad(g.newV("handoff-chain-null", "D3: chain is an array", "json", toJSON(newObj("offer", e, "chain", nil)))).offerDigest(e.octets).at(-1, "chain")
	bad(g.h("handoff-chain-with-object", "D3: chain elements are text", false, e, []any{newObj("jws", "a.b.c")})).at(-1, "chain")
	bad(g.h("handoff-chain-second-element-number", "D3: chain elements are text", false, e, []any{string(g.single("handoff-x", fJWS, nil).octets), 5})).at(-1, "chain")
	bad(g.newV("handoff-offer-number", "D3: offer is a signed element (text)", "json", []byte(`{"offer":42}`))).at(-1, "offer")
	bad(g.newV("handoff-offer-number-cbor", "D3: offer is a signed element (text or bstr)", "cbor", toCBOR(newObj("offer", 42))))
	bad(g.newV("handoff-offer-null", "D3: offer is a signed element", "json", []byte(`{"offer":null}`)))
	bad(g.newV("handoff-offer-object", "D3: offer is a signed element", "json", toJSON(newObj("offer", g.offer("handoff-offer-object", nil)))))
	bad(g.newV("handoff-offer-array", "D3: offer is one signed element", "json", toJSON(newObj("offer", []any{e}))))
	bad(g.newV("handoff-offer-bstr-tagged-cbor", "SPEC 4: offer null for an offer of another type (a tagged bstr)", "cbor", toCBOR(newObj("offer", raw{c: cTag(24, cBytes(ec.octets))}))))
	bad(g.newV("handoff-offer-not-base64url", "D6/SPEC 4: text that is neither a JWS nor base64url; offer null", "json", []byte(`{"offer":"not base64url!"}`)))
	bad(g.newV("handoff-offer-empty-string", "SPEC 1 B64u: not empty", "json", []byte(`{"offer":""}`)))
	g.h("handoff-offer-two-part-text", "SPEC 4: text with a '.' is taken as a JWS (its ASCII octets digested); D3: not JwsCompact, a malformed Handoff; D7 unchecked", false, "a.b", nil).
		reject("bad-signature", "unchecked").offerDigest([]byte("a.b"))
	g.h("handoff-offer-jws-with-spaces", "SPEC 1 JwsCompact: no white space around the text (D3 malformed Handoff, D7 unchecked); SPEC 4 digest of the text's octets", false, " "+string(e.octets)+"\n", nil).
		reject("bad-signature", "unchecked").offerDigest([]byte(" " + string(e.octets) + "\n"))
	bad(g.newV("handoff-cbor-cose-as-text", "D3: in CBOR a COSE_Sign1 travels as a byte string, text must be a JWS; SPEC 4 digest of the decoded octets", "cbor",
		toCBOR(newObj("offer", ec.asText())))).offerDigest(ec.octets).at(-1, "offer")
	bad(g.newV("handoff-json-array", "SPEC 1: the Handoff is a map", "json", toJSON([]any{e})))
	bad(g.newV("handoff-json-string", "SPEC 1: the Handoff is a map", "json", toJSON(string(e.octets))))
	bad(g.newV("handoff-duplicate-offer", "D3: strict JSON, no duplicate member names", "json", toJSON(newObj("offer", e, "offer", e))))
	bad(g.newV("handoff-duplicate-chain", "D3: strict JSON, no duplicate member names", "json", toJSON(newObj("offer", e, "chain", []any{e}, "chain", []any{e}))))
	bad(g.newV("handoff-duplicate-offer-cbor", "D3: CBOR free of duplicate keys", "cbor", toCBOR(newObj("offer", ec, "offer", ec))))
	bad(g.newV("handoff-trailing-garbage", "D3: one JSON value (trailing garbage)", "json", append(toJSON(handoffTree(e, nil)), "garbage"...)))
	bad(g.newV("handoff-trailing-second-object", "D3: one JSON value", "json", append(toJSON(handoffTree(e, nil)), toJSON(handoffTree(e, nil))...)))
	bad(g.newV("handoff-trailing-garbage-cbor", "D3: one CBOR data item", "cbor", append(toCBOR(handoffTree(ec, nil)), 0x00)))
	bad(g.newV("handoff-empty-file", "SPEC 4: an empty file is not a Handoff: bad-signature, offer null", "cbor", []byte{}))
	bad(g.newV("handoff-whitespace-only", "SPEC 4: not a Handoff", "json", []byte(" \n\t ")))
	full := toCBOR(handoffTree(ec, nil))
	bad(g.newV("handoff-truncated-cbor", "SPEC 4: a truncated CBOR Handoff: bad-signature, offer null", "cbor", full[:len(full)/2]))
	fullJ := toJSON(handoffTree(e, nil))
	bad(g.newV("handoff-truncated-json", "SPEC 4: a truncated JSON Handoff", "json", fullJ[:len(fullJ)-1]))
	bad(g.newV("handoff-cbor-indefinite-map", "D3: definite-length CBOR", "cbor", append(append([]byte{0xbf}, full[1:]...), 0xff)))
	bad(g.newV("handoff-cbor-int-key", "SPEC 1: text keys in CBOR too", "cbor", toCBOR(cmap{{cUint(1), cBytes(ec.octets)}})))
	bad(g.newV("handoff-cbor-tagged", "SPEC 1: the Handoff is a map (not a tagged one)", "cbor", cTag(1234, full)))
	bad(g.newV("handoff-json-bom", "SPEC 4: a first byte other than JSON white space or '{' means CBOR (a BOM)", "json", append([]byte("\xef\xbb\xbf"), fullJ...)))
	bad(g.newV("handoff-json-invalid-utf8", "D3: strict JSON (UTF-8)", "json", toJSON(newObj("offer", e, "x", raw{j: "\"\xff\""}))))
}

func (g *gen) chains() {
	g.category = "chain-valid"
	for n := 1; n <= 16; n++ {
		name := fmt.Sprintf("chain-full-%02d", n)
		offer, chain, _ := g.build(name, mixed(path(relayPath(n)...)))
		g.h(name, "draft Checking a Chain, D6, D7: a full chain of mixed JWS/COSE elements", n%2 == 0, offer, chain).accept("full")
	}
	type pure struct {
		name string
		f    form
		cbor bool
	}
	for _, pc := range []pure{
		{"chain-full-03-jws-json", fJWS, false}, {"chain-full-03-jws-cbor", fJWS, true},
		{"chain-full-03-cose-json", fCOSE, false}, {"chain-full-03-cose-cbor", fCOSE, true},
		{"chain-full-03-cose-nokid-cbor", fCOSENoKid, true},
	} {
		offer, chain, _ := g.build(pc.name, allForm(path(A, P, "https://relay01.example", C, T), pc.f))
		g.h(pc.name, "draft Checking a Chain: a full chain, one signed form", pc.cbor, offer, chain).accept("full")
	}
	offer, chain, _ := g.build("chain-full-draft-example", path(A, P, C))
	g.h("chain-full-draft-example", "draft Example: assistant -> planner -> coder, one chain element", false, offer, chain).accept("full").me(C)

	// Earlier offers are history: expired chain elements are fine.
	h := path(A, P, C, T)
	h[0].iat, h[0].exp = now-400, now-200
	h[1].iat, h[1].exp = now-250, now-50
	h[2].iat, h[2].exp = now-30, now+200
	offer, chain, _ = g.build("chain-expired-elements", h)
	g.h("chain-expired-elements", "draft Freshness: only the outer offer's expiry is checked; chain elements need only timing", false, offer, chain).accept("full")
	h = path(A, P, C, T)
	h[0].iat, h[0].exp = now-5000, now+5000
	offer, chain, _ = g.build("chain-element-long-lifetime", h)
	g.h("chain-element-long-lifetime", "D4 applies to the outer offer only", true, offer, chain).accept("full")
	h = path(A, P, C, T)
	h[0].iat, h[0].exp = now-400, now-300
	h[1].iat, h[1].exp = now-240, now-100 // = C[0].exp + skew
	h[2].iat, h[2].exp = now-40, now+200  // = C[1].exp + skew
	offer, chain, _ = g.build("chain-timing-at-skew", h)
	g.h("chain-timing-at-skew", "draft check 4: C[i].iat = C[i-1].exp + skew is not later", false, offer, chain).accept("full")
	h = path(A, P, C, T)
	for i := range h {
		h[i].iat, h[i].exp = now-30, now+200
	}
	offer, chain, _ = g.build("chain-timing-equal-iat", h)
	g.h("chain-timing-equal-iat", "draft check 4: equal iat is not later", true, offer, chain).accept("full")
	h = mixed(path(A, P, C, T))
	h[1].mut = func(i int, o *obj) { o.add("x-unknown", newObj("a", 1)) }
	offer, chain, _ = g.build("chain-unknown-members", h)
	g.h("chain-unknown-members", "SPEC 1: unknown members in chain elements are ignored", false, offer, chain).accept("full")
	// Fan-out: a chain element is not consumed; the same chain can back two offers.
	offer, chain, _ = g.build("chain-receiver-dialog-check", path(A, P, C, T))
	g.h("chain-dialog-match", "draft step 5 with a chain", false, offer, chain).accept("full").dialog(dialogID)

	g.category = "chain-quality"
	// Partial: C[0] has a prev (its predecessor is not carried).
	h = mixed(path(A, P, C, T))
	h[0].mut = func(i int, o *obj) { o.set("prev", dig([]byte("an offer not carried"))) }
	offer, chain, _ = g.build("chain-partial", h)
	g.h("chain-partial", "draft check 5, D7: C[0] has a prev: partial", false, offer, chain).accept("partial")
	h = path(P, C, T)
	h[0].mut = func(i int, o *obj) { o.set("prev", dig([]byte("x"))) }
	offer, chain, _ = g.build("chain-partial-1", h)
	g.h("chain-partial-1", "D7: partial", true, offer, chain).accept("partial")
	h = path(A, P, C, T)
	h[0].mut = func(i int, o *obj) { o.set("prev", newObj("alg", "x-hash", "val", "AAAA")) }
	offer, chain, _ = g.build("chain-partial-prev-unknown-alg", h)
	g.h("chain-partial-prev-unknown-alg", "D7: C[0]'s prev is not checked against anything: partial", false, offer, chain).accept("partial")
	h = path(A, P, C, T)
	h[0].mut = func(i int, o *obj) { o.set("prev", dig([]byte("x"))) }
	offer, chain, _ = g.build("chain-partial-require-full", h)
	g.h("chain-partial-require-full", "D7: require full chain rejects a partial chain with policy; the chain checks ran: partial", false, offer, chain).
		reject("policy", "partial").full().at(-1, "chain")

	// Unverifiable: an element whose iss has no trusted key.
	offer, chain, _ = g.build("chain-unverifiable-outsider", path(X, P, C, T))
	g.h("chain-unverifiable-outsider", "draft check 1, D6, D7: C[0].iss untrusted: unverifiable, not a rejection", false, offer, chain).accept("unverifiable")
	offer, chain, _ = g.build("chain-unverifiable-outsider-cose", allForm(path(X, P, C, T), fCOSE))
	g.h("chain-unverifiable-outsider-cose", "D6, D7: unverifiable", true, offer, chain).accept("unverifiable")
	offer, chain, _ = g.build("chain-unverifiable-middle", mixed(path(A, "https://unlisted.example", C, T)))
	g.h("chain-unverifiable-middle", "D6: unverifiable from that point back", false, offer, chain).accept("unverifiable")
	h = path(A, P, C, T)
	h[0].f = fJWS
	h[0].signer = &agent{key: g.agents["assistant"].key, kid: "no-such-kid"}
	offer, chain, _ = g.build("chain-unverifiable-unknown-kid", h)
	g.h("chain-unverifiable-unknown-kid", "D6: an element for which D1 (b) finds no key with its kid is unverifiable", false, offer, chain).accept("unverifiable")
	h = path(A, P, C, T)
	h[0].signer = g.agents["outsider"]
	h[0].f = fCOSE
	offer, chain, _ = g.build("chain-unverifiable-kid-of-untrusted-key", h)
	g.h("chain-unverifiable-kid-of-untrusted-key", "D6: the kid names no key bound to the trusted iss: unverifiable", true, offer, chain).accept("unverifiable")
	h = path(X, P, C, T)
	h[0].mut = func(i int, o *obj) { o.set("prev", dig([]byte("x"))) }
	offer, chain, _ = g.build("chain-unverifiable-and-partial", h)
	g.h("chain-unverifiable-and-partial", "D7: unverifiable outranks partial", false, offer, chain).accept("unverifiable")
	offer, chain, _ = g.build("chain-unverifiable-require-full", path(X, P, C, T))
	g.h("chain-unverifiable-require-full", "D7: require full chain rejects an unverifiable chain with policy", false, offer, chain).
		reject("policy", "unverifiable").full().at(-1, "chain")
	offer, chain, _ = g.build("chain-full-require-full", mixed(path(A, P, C, T)))
	g.h("chain-full-require-full", "D7: a full chain passes require-full-chain", true, offer, chain).accept("full").full()
	g.h("chain-absent-prev-require-full", "D7, draft step 6: a chain required, none carried, offer has prev: policy, absent", false,
		g.single("chain-absent-prev-require-full", fJWS, func(o *obj) { o.set("prev", dig([]byte("x"))) }), nil).reject("policy", "absent").full()

	g.category = "too-deep"
	offer, chain, _ = g.build("chain-too-deep-17", mixed(path(relayPath(17)...)))
	g.h("chain-too-deep-17", "draft check 7, D4, D6: 17 elements exceed the default maximum of 16", false, offer, chain).reject("too-deep", "unchecked")
	offer, chain, _ = g.build("chain-too-deep-17-cbor", mixed(path(relayPath(17)...)))
	g.h("chain-too-deep-17-cbor", "draft check 7: too-deep", true, offer, chain).reject("too-deep", "unchecked")
	offer, chain, _ = g.build("chain-max-chain-3", path(A, P, "https://relay01.example", C, T))
	g.h("chain-max-chain-3-at-limit", "D4: max chain length configurable; 3 elements at a limit of 3", false, offer, chain).accept("full").maxChain(3)
	offer, chain, _ = g.build("chain-max-chain-2", path(A, P, "https://relay01.example", C, T))
	g.h("chain-max-chain-2-exceeded", "D4, D6: 3 elements over a limit of 2: too-deep", false, offer, chain).reject("too-deep", "unchecked").maxChain(2)
	// Length first, before any element is parsed: garbage elements.
	o := g.single("chain-too-deep-garbage", fJWS, func(o *obj) { o.set("prev", dig([]byte("x"))) })
	var junk []any
	for i := 0; i < 17; i++ {
		junk = append(junk, "garbage element !")
	}
	g.h("chain-too-deep-before-parse", "D6: the length is checked first of all, before any element is parsed", false, o, junk).reject("too-deep", "unchecked")
	h = mixed(path(relayPath(17)...))
	h[3].post = func(e elem) any { return elem{cose: e.cose, octets: flipBit(e.octets, len(e.octets)-2, 1)} }
	offer, chain, _ = g.build("chain-too-deep-before-signature", h)
	g.h("chain-too-deep-before-signature", "D6: too-deep is reported before a bad element signature", true, offer, chain).reject("too-deep", "unchecked")
}

func (g *gen) chainFaults() {
	g.category = "chain-broken"
	broken := func(v *V) *V { return v.reject("broken-chain", "unchecked") }

	// Removal and reordering (draft: detected by check 2 or 3).
	offer, chain, _ := g.build("chain-element-removed", mixed(path(A, P, "https://relay01.example", C, T)))
	broken(g.h("chain-element-removed", "draft check 2: removing an intermediate hop breaks the prev links", false, offer, []any{chain[0], chain[2]})).at(1, "prev")
	offer, chain, _ = g.build("chain-first-removed", mixed(path(A, P, "https://relay01.example", C, T)))
	g.h("chain-first-element-removed", "draft Truncated Chains: dropping the start leaves a valid partial chain", true, offer, chain[1:]).accept("partial")
	offer, chain, _ = g.build("chain-last-removed", mixed(path(A, P, "https://relay01.example", C, T)))
	broken(g.h("chain-last-element-removed", "draft check 2: the offer's prev names the missing element", false, offer, chain[:2])).at(-1, "prev")
	offer, chain, _ = g.build("chain-reordered", mixed(path(A, P, "https://relay01.example", C, T)))
	broken(g.h("chain-reordered", "draft check 2: reordering breaks the prev links", true, offer, []any{chain[1], chain[0], chain[2]}))
	offer, chain, _ = g.build("chain-duplicated-element", path(A, P, C, T))
	broken(g.h("chain-duplicated-element", "draft check 2: a repeated element breaks the prev links", false, offer, []any{chain[0], chain[0], chain[1]}))
	h := path(A, P, C, T)
	h[2].mut = func(i int, o *obj) { o.set("prev", dig([]byte("some other offer"))) }
	offer, chain, _ = g.build("chain-prev-wrong", h)
	broken(g.h("chain-prev-wrong", "draft check 2: C[n].prev does not name C[n-1]", false, offer, chain)).at(-1, "prev")
	h = path(A, P, C, T)
	h[1].mut = func(i int, o *obj) { o.set("prev", dig([]byte("some other offer"))) }
	offer, chain, _ = g.build("chain-prev-wrong-middle", h)
	broken(g.h("chain-prev-wrong-middle", "draft check 2: C[1].prev does not name C[0]", true, offer, chain)).at(1, "prev")
	h = path(A, P, C, T)
	h[2].mut = func(i int, o *obj) {
		o.set("prev", newObj("alg", "sha-512", "val", b64.EncodeToString(bytes.Repeat([]byte{9}, 64))))
	}
	offer, chain, _ = g.build("chain-prev-unknown-alg", h)
	broken(g.h("chain-prev-unknown-alg", "D6, draft Digest: a prev whose alg is not implemented fails the link check", false, offer, chain)).at(-1, "prev")
	h = path(A, P, C, T)
	h[1].mut = func(i int, o *obj) { o.del("prev") }
	offer, chain, _ = g.build("chain-middle-without-prev", h)
	broken(g.h("chain-middle-without-prev", "draft check 2: C[1] has no prev", false, offer, chain)).at(1, "prev")
	// prev over what was carried: a re-signed (re-encoded) predecessor breaks the link.
	h = path(A, P, C, T)
	offer, chain, signed := g.build("chain-resigned-element", h)
	resigned := g.agents["planner"].jws(mustDecodeJWSPayloadBytes(signed[1]))
	broken(g.h("chain-resigned-element", "draft Handoff Digest: forwarders never re-encode; a re-signed element is another element", false, offer, []any{chain[0], resigned}))
	// prev over the base64url text instead of the COSE octets.
	h = allForm(path(A, P, C, T), fCOSE)
	h[2].mut = nil
	_, _, signed = g.build("chain-prev-over-text", h)
	h[2].mut = func(i int, o *obj) { o.set("prev", dig([]byte(signed[1].asText()))) }
	h[0].mut, h[1].mut = nil, nil
	offer, chain, _ = g.build("chain-prev-over-text", h)
	broken(g.h("chain-prev-over-base64url-text", "SPEC 2: the handoff digest is over the COSE octets, not the base64url text that carries them", false, offer, chain)).at(-1, "prev")
	// The offer has no prev but a chain is carried.
	offer, chain, _ = g.build("chain-offer-without-prev", path(A, P, C, T))
	o2 := g.single("chain-offer-without-prev-2", fJWS, func(o *obj) { o.set("iss", C) })
	_ = offer
	broken(g.h("chain-offer-without-prev", "D6: a chain carried with an offer that has no prev", false, o2, chain))

	// Continuity.
	h = path(A, P, C, T)
	h[0].aud = "https://elsewhere.example"
	offer, chain, _ = g.build("chain-continuity-broken", h)
	broken(g.h("chain-continuity-broken", "draft check 3: C[i-1].aud equals C[i].iss", false, offer, chain)).at(1, "iss")
	h = path(A, P, C, T)
	h[1].aud = "https://elsewhere.example"
	offer, chain, _ = g.build("chain-continuity-broken-at-offer", h)
	broken(g.h("chain-continuity-broken-at-offer", "draft check 3: C[n-1].aud equals the offer's iss", true, offer, chain)).at(-1, "iss")

	// Timing, both ways.
	h = path(A, P, C, T)
	h[0].iat, h[0].exp = now-100, now+100
	h[1].iat, h[1].exp = now-101, now+100
	offer, chain, _ = g.build("chain-timing-iat-decreasing", h)
	broken(g.h("chain-timing-iat-decreasing", "draft check 4: C[i-1].iat not later than C[i].iat", false, offer, chain)).at(1, "iat")
	h = path(A, P, C, T)
	h[0].iat, h[0].exp = now-400, now-300
	h[1].iat, h[1].exp = now-239, now-100 // C[0].exp + skew + 1
	offer, chain, _ = g.build("chain-timing-after-exp", h)
	broken(g.h("chain-timing-after-exp", "draft check 4: C[i].iat not later than C[i-1].exp + skew", false, offer, chain)).at(1, "iat")
	h = path(A, P, C, T)
	h[1].iat, h[1].exp = now-400, now-200
	h[0].iat, h[0].exp = now-500, now-300
	h[2].iat, h[2].exp = now-30, now+200 // > C[1].exp + 60
	offer, chain, _ = g.build("chain-timing-offer-after-exp", h)
	broken(g.h("chain-timing-offer-after-exp", "draft check 4: the offer passed on an expired offer", true, offer, chain)).at(-1, "iat")
	h = path(A, P, C, T)
	h[1].iat, h[1].exp = now-20, now+200
	h[2].iat, h[2].exp = now-30, now+200
	offer, chain, _ = g.build("chain-timing-offer-before-prev", h)
	broken(g.h("chain-timing-offer-before-prev", "draft check 4: the offer is issued before the offer it passes on", false, offer, chain)).at(-1, "iat")

	// Cycles.
	g.category = "cycle"
	cyc := func(v *V) *V { return v.reject("cycle", "unchecked") }
	offer, chain, _ = g.build("chain-cycle-repeated-iss", mixed(path(A, P, A, T)))
	cyc(g.h("chain-cycle-repeated-iss", "draft check 6, D8: an AgentId that is iss of more than one of C[0..n]", false, offer, chain)).at(-1, "iss")
	offer, chain, _ = g.build("chain-cycle-repeated-iss-in-chain", path(A, P, C, P, "https://relay02.example", T))
	cyc(g.h("chain-cycle-repeated-iss-in-chain", "D8: P is iss of C[1] and C[3]", true, offer, chain)).at(3, "iss")
	ids := relayPath(6)
	ids[4] = relayID(2)
	offer, chain, _ = g.build("chain-cycle-relay", mixed(path(ids...)))
	cyc(g.h("chain-cycle-relay", "D8: relay02 appears twice as iss", false, offer, chain)).at(4, "iss")
	offer, chain, _ = g.build("chain-cycle-via-receiver-aud", path(A, T, P, T))
	cyc(g.h("chain-cycle-via-receiver-aud", "D8: the receiver's AgentId as aud of C[i], i < n", false, offer, chain)).at(0, "aud")
	offer, chain, _ = g.build("chain-cycle-via-receiver-iss", path(T, P, T))
	cyc(g.h("chain-cycle-via-receiver-iss", "D8: the receiver's AgentId as iss of C[i], i < n", true, offer, chain)).at(0, "iss")
	offer, chain, _ = g.build("chain-cycle-receiver-aud-unverifiable", path(X, T, P, T))
	cyc(g.h("chain-cycle-receiver-unverifiable", "D6: cycles are checked over every decoded payload, verified or not", false, offer, chain))
	offer, chain, _ = g.build("chain-cycle-two-untrusted", path(X, "https://unlisted.example", X, C, T))
	cyc(g.h("chain-cycle-untrusted-elements", "D6, D8: cycle over unverified elements", false, offer, chain))
	// Order: timing before cycle.
	h = path(A, P, A, T)
	h[1].iat, h[1].exp = now-200, now+50
	h[0].iat, h[0].exp = now-100, now+100
	offer, chain, _ = g.build("chain-timing-before-cycle", h)
	broken(g.h("chain-timing-before-cycle", "D6: timing is reported before cycle", false, offer, chain))
	// Order: too-deep before cycle.
	ids = relayPath(17)
	ids[5] = relayID(1)
	offer, chain, _ = g.build("chain-too-deep-before-cycle", path(ids...))
	g.h("chain-too-deep-before-cycle", "D6: the length first of all", false, offer, chain).reject("too-deep", "unchecked")
	// Order: links before cycle.
	h = path(A, P, A, T)
	h[2].mut = func(i int, o *obj) { o.set("prev", dig([]byte("nothing"))) }
	offer, chain, _ = g.build("chain-links-before-cycle", h)
	broken(g.h("chain-links-before-cycle", "D6: prev links are reported before cycle", true, offer, chain))

	// Elements that are not valid signed offers.
	g.category = "chain-element"
	e := g.single("chain-garbage-offer", fJWS, func(o *obj) { o.set("prev", dig([]byte("garbage element !"))) })
	broken(g.h("chain-element-garbage-text", "D6: text that is neither a JWS nor base64url is broken-chain", false, e, []any{"garbage element !"})).at(0, "")
	e = g.single("chain-garbage-offer-cbor", fJWS, func(o *obj) { o.set("prev", dig([]byte{1, 2, 3})) })
	broken(g.h("chain-element-garbage-bytes-cbor", "D6: a byte string that is not a COSE_Sign1 is broken-chain", true, e, []any{bs{1, 2, 3}})).at(0, "")
	e = g.single("chain-garbage-jws", fJWS, func(o *obj) { o.set("prev", dig([]byte("a.b.c"))) })
	broken(g.h("chain-element-bad-jws", "D6: a malformed JWS in the chain is broken-chain", false, e, []any{"a.b.c"})).at(0, "")
	h = mixed(path(A, P, C, T))
	h[0].post = func(e elem) any {
		if e.cose {
			return elem{cose: true, octets: flipBit(e.octets, len(e.octets)-5, 0x04)}
		}
		hh, pp, ss := jwsSplit(e)
		return jwsJoin(hh, pp, flipChar(ss, 9))
	}
	offer, chain, _ = g.build("chain-element-bad-signature", h)
	broken(g.h("chain-element-bad-signature", "D6: a present but wrong signature by a trusted iss is broken-chain", false, offer, chain)).at(0, "")
	h = allForm(path(A, P, C, T), fCOSE)
	h[1].post = func(e elem) any { return elem{cose: true, octets: flipBit(e.octets, len(e.octets)-5, 0x04)} }
	offer, chain, _ = g.build("chain-element-bad-signature-cose", h)
	broken(g.h("chain-element-bad-signature-cose", "D6: broken-chain", true, offer, chain)).at(1, "")
	h = path(A, P, C, T)
	h[0].signer = &agent{key: g.agents["outsider"].key, kid: g.agents["assistant"].kid}
	offer, chain, _ = g.build("chain-element-wrong-key", h)
	broken(g.h("chain-element-signed-by-wrong-key", "D6: a trusted iss and kid, another key signed: broken-chain", false, offer, chain)).at(0, "")
	h = path(A, P, C, T)
	h[0].mut = func(i int, o *obj) { o.set("v", 2) }
	offer, chain, _ = g.build("chain-element-malformed-payload", h)
	broken(g.h("chain-element-malformed-payload", "D6, D3: a validly signed element whose payload breaks the data model", false, offer, chain)).at(0, "v")
	h = path(X, P, C, T)
	h[0].mut = func(i int, o *obj) { o.set("hop", "AAAA") }
	offer, chain, _ = g.build("chain-element-untrusted-malformed", h)
	broken(g.h("chain-element-untrusted-malformed", "D1 (a) before (b): a malformed element is broken-chain even when its iss is untrusted", false, offer, chain)).at(0, "hop")
	h = path(A, P, C, T)
	h[1].mut = func(i int, o *obj) { o.set("type", "status") }
	offer, chain, _ = g.build("chain-element-type-status", h)
	broken(g.h("chain-element-type-status", "D1 (a), D6: a chain element is an offer", true, offer, chain)).at(1, "type")
	for _, tc := range []struct{ name, hdr string }{
		{"chain-element-crit", `{"alg":"ES256","crit":["exp"],"kid":"%s","typ":"agent-handoff+jwt"}`},
		{"chain-element-alg-none", `{"alg":"none","kid":"%s","typ":"agent-handoff+jwt"}`},
		{"chain-element-typ-jwt", `{"alg":"ES256","kid":"%s","typ":"JWT"}`},
	} {
		h = path(A, P, C, T)
		hdr := fmt.Sprintf(tc.hdr, g.agents["assistant"].kid)
		h[0].signFn = func(a *agent, o *obj) elem { return jwsRaw(a.key, hdr, toJSON(o)) }
		offer, chain, _ = g.build(tc.name, h)
		broken(g.h(tc.name, "D1 (a), D6: a chain element's signed form", false, offer, chain)).at(0, "")
	}
	// A COSE element with crit in its protected header.
	h = allForm(path(A, P, C, T), fCOSE)
	h[0].signFn = func(a *agent, o *obj) elem {
		return coseRaw(a.key, toCBOR(cmap{{cUint(1), cInt(-7)}, {cUint(2), cArray(cUint(3))}, {cUint(3), cText(coseCT)}, {cUint(4), cBytes([]byte(a.kid))}}), nil, toCBOR(o))
	}
	offer, chain, _ = g.build("chain-element-cose-crit", h)
	broken(g.h("chain-element-cose-crit", "D1 (a), D6: COSE crit in a chain element", true, offer, chain)).at(0, "")
	h = path(A, P, C, T)
	h[0].f = fCOSE
	h[0].post = func(e elem) any { return e.asText() } // base64url text in a CBOR Handoff
	offer, chain, _ = g.build("chain-element-cose-text-in-cbor", h)
	broken(g.h("chain-element-cose-text-in-cbor", "SPEC 1 SignedHandoffCbor = JwsCompact / bstr; D6: not a well-formed signed offer in a CBOR chain", true, offer, chain)).at(0, "").
		note("lower confidence: D3 admits text elements in a CBOR chain; by the CDDL such text must be a JWS")
	// Unverifiable elements are still checked for links, continuity and timing.
	h = path(X, P, C, T)
	h[0].aud = "https://elsewhere.example"
	offer, chain, _ = g.build("chain-unverifiable-continuity-broken", h)
	broken(g.h("chain-unverifiable-continuity-broken", "D6: links, continuity, timing and cycles are checked over every element, verified or not", false, offer, chain)).at(1, "iss")
	h = path(X, P, C, T)
	h[0].iat, h[0].exp = now-10, now+100
	offer, chain, _ = g.build("chain-unverifiable-timing-broken", h)
	broken(g.h("chain-unverifiable-timing-broken", "D6: timing over unverified elements", false, offer, chain)).at(1, "iat")
	// Order inside the chain checks: signature (check 1) before links (check 2).
	h = path(A, P, C, T)
	h[1].post = func(e elem) any { hh, pp, ss := jwsSplit(e); return jwsJoin(hh, pp, flipChar(ss, 9)) }
	h[2].mut = func(i int, o *obj) { o.set("prev", dig([]byte("wrong"))) }
	offer, chain, _ = g.build("chain-signature-before-links", h)
	broken(g.h("chain-signature-before-links", "D6: each element's signature is reported before the prev links", false, offer, chain)).at(1, "")
	// Step 5 before step 6.
	h = path(A, P, C, T)
	h[2].mut = func(i int, o *obj) { o.set("prev", dig([]byte("wrong"))) }
	offer, chain, _ = g.build("chain-dialog-before-chain", h)
	g.h("chain-dialog-before-chain", "draft steps 5 then 6: dialog mismatch before the chain is checked; D7 unchecked", false, offer, chain).
		reject("policy", "unchecked").dialog("another-dialog").at(-1, "dialog")
	// Rejections before step 6 with a chain: unchecked.
	h = path(A, P, C, T)
	h[2].aud = P
	offer, chain, _ = g.build("chain-wrong-audience", h)
	g.h("chain-wrong-audience-unchecked", "D7: a rejection before step 6 prints unchecked when a chain is carried", false, offer, chain).reject("wrong-audience", "unchecked")
	h = path(A, P, C, T)
	h[2].iat, h[2].exp = now-30, now-1
	offer, chain, _ = g.build("chain-stale-offer", h)
	g.h("chain-stale-unchecked", "D7: a rejection before step 6 prints unchecked", true, offer, chain).reject("stale", "unchecked")
}

func mustDecodeJWSPayloadBytes(e elem) []byte {
	_, p, _ := jwsSplit(e)
	b, err := b64.DecodeString(p)
	if err != nil {
		panic(err)
	}
	return b
}

func (g *gen) bounds() {
	g.category = "bounds"
	g.h("bounds-refs-64", "SPEC 4 Bounds: at most 64 refs", false,
		g.single("bounds-refs-64", fJWS, func(o *obj) { o.set("refs", manyRefs(64)) }), nil).accept("absent")
	g.h("bounds-refs-65", "SPEC 4 Bounds: more than 64 refs rejects with policy", false,
		g.single("bounds-refs-65", fJWS, func(o *obj) { o.set("refs", manyRefs(65)) }), nil).reject("policy", "absent").at(-1, "refs")
	g.h("bounds-refs-65-cose", "SPEC 4 Bounds: more than 64 refs rejects with policy", true,
		g.single("bounds-refs-65-cose", fCOSE, func(o *obj) { o.set("refs", manyRefs(65)) }), nil).reject("policy", "absent").at(-1, "refs")
	e := g.single("bounds-element-too-large", fJWS, func(o *obj) { o.add("x-pad", strings.Repeat("a", 50000)) })
	g.h("bounds-element-too-large", "SPEC 4 Bounds: a signed element of more than 64 KiB rejects with policy", false, e, nil).reject("policy", "absent")
	e = g.single("bounds-element-too-large-cose", fCOSE, func(o *obj) { o.add("x-pad", bs(bytes.Repeat([]byte{0}, 65536))) })
	g.h("bounds-element-too-large-cose", "SPEC 4 Bounds: a signed element of more than 64 KiB rejects with policy", true, e, nil).reject("policy", "absent")
	e = g.single("bounds-element-below-limit", fCOSE, func(o *obj) { o.add("x-pad", bs(bytes.Repeat([]byte{0}, 60000))) })
	g.h("bounds-element-below-limit", "SPEC 4 Bounds: an element under 64 KiB is fine", true, e, nil).accept("absent")
	h := path(A, P, C, T)
	h[0].mut = func(i int, o *obj) { o.set("refs", manyRefs(65)) }
	offer, chain, _ := g.build("bounds-chain-element-refs-65", h)
	g.h("bounds-chain-element-refs-65", "SPEC 4 Bounds: exceeding one rejects with policy (also in a chain element)", false, offer, chain).reject("policy", "unchecked").at(0, "refs")
	h = path(A, P, C, T)
	h[0].mut = func(i int, o *obj) { o.add("x-pad", strings.Repeat("b", 50000)) }
	offer, chain, _ = g.build("bounds-chain-element-too-large", h)
	g.h("bounds-chain-element-too-large", "SPEC 4 Bounds: a chain element over 64 KiB rejects with policy", false, offer, chain).reject("policy", "unchecked").at(0, "")
}

// sequences are vectors with 'before' files: one receiver state (D5).
func (g *gen) sequences() {
	g.category = "replay"
	acc := expect{Result: "accepted", Chain: "absent"}
	file := func(name string, cbor bool, offer elem, chain []any) (string, *string) {
		f := name + "." + ext(cbor)
		g.writeFile(f, encode(cbor, handoffTree(offer, chain)))
		return f, digestOf(offer.octets)
	}
	ex := func(result, reason, chain string, d *string) expect {
		e := expect{Result: result, Chain: chain, Offer: d}
		if reason != "" {
			e.Reason = str(reason)
		}
		return e
	}

	e := g.single("seq-retransmission", fJWS, nil)
	f, d := file("seq-retransmission-first", false, e, nil)
	acc.Offer = d
	g.h("replay-retransmission", "D5, draft step 4: the same octets for a remembered (iss, hop) are a retransmission", false, e, nil).
		outcome("retransmission", "", "absent").before(f, now, "", acc)
	e = g.single("seq-retransmission-encodings", fCOSE, nil)
	f, d = file("seq-retransmission-encodings-first", false, e, nil)
	acc.Offer = d
	g.h("replay-retransmission-other-encoding", "D5: the same offer in another Handoff encoding is still a retransmission", true, e, nil).
		outcome("retransmission", "", "absent").before(f, now, "", acc)
	e = g.single("seq-retransmission-after-exp", fJWS, nil)
	f, d = file("seq-retransmission-after-exp-first", false, e, nil)
	acc.Offer = d
	g.h("replay-retransmission-after-exp", "draft step 3, D4: a remembered (iss, hop) skips freshness: retransmission after exp", false, e, nil).
		outcome("retransmission", "", "absent").before(f, now, "", acc).at_now(now + 1000)
	offer, chain, _ := g.build("seq-retransmission-chain", path(A, P, C, T))
	f, d = file("seq-retransmission-chain-first", false, offer.(elem), chain)
	g.h("replay-retransmission-with-chain", "D7: a retransmission prints unchecked when a chain is carried", true, offer, chain).
		outcome("retransmission", "", "unchecked").before(f, now, "", ex("accepted", "", "full", d))
	g.h("replay-retransmission-chain-dropped", "D5: retransmission compares the offer's signed octets only", false, offer, nil).
		outcome("retransmission", "", "absent").before(f, now, "", ex("accepted", "", "full", d))

	// Equivocation.
	e1 := g.single("seq-equivocation", fJWS, nil)
	e2 := g.single("seq-equivocation", fJWS, func(o *obj) { o.set("task", "another task") })
	f, d = file("seq-equivocation-first", false, e1, nil)
	acc.Offer = d
	g.h("replay-equivocation", "D5, draft Forks: same (iss, hop), different octets: equivocation", false, e2, nil).
		outcome("equivocation", "equivocation", "absent").before(f, now, "", acc)
	// Same signed content is the same offer (D5): copies that anyone on
	// the path can make without the key, and the issuer's own re-signing
	// of the same payload, are retransmissions, whatever their octets.
	coder := g.agents["coder"]
	e1 = g.single("seq-copy-resigned", fCOSE, nil)
	e2 = g.single("seq-copy-resigned", fCOSE, nil) // same payload, new ECDSA signature
	f, d = file("seq-copy-resigned-first", true, e1, nil)
	acc.Offer = d
	g.h("replay-copy-same-payload-resigned", "D5: the same payload and protected header signed again is the same offer: retransmission", true, e2, nil).
		outcome("retransmission", "", "absent").before(f, now, "", acc)
	e1 = g.single("seq-copy-resigned-jws", fJWS, nil)
	e2 = g.single("seq-copy-resigned-jws", fJWS, nil)
	f, d = file("seq-copy-resigned-jws-first", false, e1, nil)
	acc.Offer = d
	g.h("replay-copy-jws-resigned", "D5: a JWS with the same signing input signed again is the same offer: retransmission", false, e2, nil).
		outcome("retransmission", "", "absent").before(f, now, "", acc)
	e1 = g.single("seq-copy-jws-malleated", fJWS, nil)
	f, d = file("seq-copy-jws-malleated-first", false, e1, nil)
	acc.Offer = d
	g.h("replay-copy-jws-malleated", "D5: a JWS whose ECDSA signature is rewritten as (r, N-s) is the same offer: retransmission", false, malleateJWS(e1), nil).
		outcome("retransmission", "", "absent").before(f, now, "", acc)
	payload := toCBOR(g.offer("seq-copy-cose-malleated", nil))
	prot, sig := coder.coseParts(payload)
	e1 = elem{cose: true, octets: coseMsg(prot, cMap(), payload, sig)}
	f, d = file("seq-copy-cose-malleated-first", true, e1, nil)
	acc.Offer = d
	g.h("replay-copy-cose-malleated", "D5: a COSE_Sign1 whose ECDSA signature is rewritten as (r, N-s) is the same offer: retransmission", true,
		elem{cose: true, octets: coseMsg(prot, cMap(), payload, malleateSig(sig))}, nil).
		outcome("retransmission", "", "absent").before(f, now, "", acc)
	payload = toCBOR(g.offer("seq-copy-cose-unprotected", nil))
	prot, sig = coder.coseParts(payload)
	e1 = elem{cose: true, octets: coseMsg(prot, cMap(), payload, sig)}
	f, d = file("seq-copy-cose-unprotected-first", true, e1, nil)
	acc.Offer = d
	g.h("replay-copy-cose-unprotected-edited", "D5: a COSE_Sign1 with an edited unprotected header is the same offer: retransmission", true,
		elem{cose: true, octets: coseMsg(prot, cMap(cText("x-note"), cText("added on the path")), payload, sig)}, nil).
		outcome("retransmission", "", "absent").before(f, now, "", acc)
	e1 = g.single("seq-equivocation-protected", fCOSE, nil)
	payload = toCBOR(g.offer("seq-equivocation-protected", nil))
	e2 = coseRaw(coder.key, toCBOR(cmap{
		{cUint(coseLblAlg), cInt(coseAlgES)},
		{cUint(coseLblCT), cText(coseCT)},
		{cUint(coseLblKid), cBytes([]byte(coder.kid))},
		{cText("x-note"), cText("another protected header")},
	}), nil, payload)
	f, d = file("seq-equivocation-protected-first", true, e1, nil)
	acc.Offer = d
	g.h("replay-equivocation-other-protected-header", "D5: the same payload under another protected header is different signed content: equivocation", true, e2, nil).
		outcome("equivocation", "equivocation", "absent").before(f, now, "", acc)
	e1 = g.single("seq-equivocation-after-exp", fJWS, nil)
	e2 = g.single("seq-equivocation-after-exp", fJWS, func(o *obj) { o.set("iat", now-100).set("exp", now+100) })
	f, d = file("seq-equivocation-after-exp-first", false, e1, nil)
	acc.Offer = d
	g.h("replay-equivocation-after-exp", "draft step 3: an equivocating offer is equivocation even after exp", false, e2, nil).
		outcome("equivocation", "equivocation", "absent").before(f, now, "", acc).at_now(now + 5000)
	e1 = g.single("seq-equivocation-third", fJWS, nil)
	e2 = g.single("seq-equivocation-third", fJWS, func(o *obj) { o.set("task", "2") })
	e3 := g.single("seq-equivocation-third", fJWS, func(o *obj) { o.set("task", "3") })
	f, d = file("seq-equivocation-third-1", false, e1, nil)
	f2, d2 := file("seq-equivocation-third-2", false, e2, nil)
	acc.Offer = d
	g.h("replay-equivocation-first-digest-kept", "D5: a later offer never replaces the first remembered digest", false, e1, nil).
		outcome("retransmission", "", "absent").before(f, now, "", acc).before(f2, now, "", ex("equivocation", "equivocation", "absent", d2))
	_ = e3

	// What is remembered.
	e1 = g.single("seq-stale-not-remembered", fJWS, func(o *obj) { o.set("iat", now+100).set("exp", now+200) })
	e2 = g.single("seq-stale-not-remembered", fJWS, nil)
	f, d = file("seq-stale-not-remembered-first", false, e1, nil)
	g.h("replay-stale-not-remembered", "D5: only offers that passed steps 1-3 are remembered", false, e2, nil).
		accept("absent").before(f, now, "", ex("rejected", "stale", "absent", d))
	e1 = g.single("seq-wrong-aud-not-remembered", fJWS, func(o *obj) { o.set("aud", P) })
	e2 = g.single("seq-wrong-aud-not-remembered", fJWS, nil)
	f, d = file("seq-wrong-aud-not-remembered-first", false, e1, nil)
	g.h("replay-wrong-audience-not-remembered", "D5: an offer that failed step 2 is not remembered", false, e2, nil).
		accept("absent").before(f, now, "", ex("rejected", "wrong-audience", "absent", d))
	e1 = g.single("seq-dialog-remembered", fJWS, nil)
	f, d = file("seq-dialog-remembered-first", false, e1, nil)
	g.h("replay-dialog-rejection-remembered", "D5: an offer rejected at step 5 passed steps 1-3 and is remembered", false, e1, nil).
		outcome("retransmission", "", "absent").before(f, now, "another-dialog", ex("rejected", "policy", "absent", d))
	h := path(A, P, C, T)
	h[2].mut = func(i int, o *obj) { o.set("prev", dig([]byte("wrong"))) }
	offer, chain, _ = g.build("seq-broken-chain-remembered", h)
	f, d = file("seq-broken-chain-remembered-first", false, offer.(elem), chain)
	g.h("replay-broken-chain-remembered", "D5: an offer rejected at step 6 is remembered", false, offer, nil).
		outcome("retransmission", "", "absent").before(f, now, "", ex("rejected", "broken-chain", "unchecked", d))
	e1 = g.single("seq-other-iss-same-hop", fJWS, nil)
	e2 = g.agents["planner"].jws(toJSON(g.offer("seq-other-iss-same-hop", func(o *obj) { o.set("iss", P) })))
	f, d = file("seq-other-iss-same-hop-first", false, e1, nil)
	acc.Offer = d
	g.h("replay-same-hop-other-iss", "draft Freshness: the pair is (iss, hop); another iss may use the same hop", false, e2, nil).
		accept("absent").before(f, now, "", acc)
}

// edges are further probes of the decisions' corners.
func (g *gen) edges() {
	g.category = "edge"
	c := g.agents["coder"]
	e := g.single("edge-offer", fJWS, nil)

	// Byte strings and text in odd places of a Handoff.
	g.newV("edge-cbor-jws-as-bytes", "SPEC 1: a bstr in CBOR is a COSE_Sign1; JWS octets as bstr are no COSE message; SPEC 4 digest of the bstr", "cbor",
		toCBOR(newObj("offer", bs(e.octets)))).reject("bad-signature", "absent").offerDigest(e.octets)
	g.newV("edge-cbor-offer-empty-bstr", "SPEC 4: offer carried as a byte string: its digest is reported; D7 absent (no chain member)", "cbor",
		toCBOR(newObj("offer", bs{}))).reject("bad-signature", "absent").offerDigest([]byte{})
	o := g.single("edge-chain-empty-text", fJWS, func(o *obj) { o.set("prev", dig([]byte{})) })
	g.h("edge-chain-element-empty-text", "D6: text that is neither a JWS nor base64url is broken-chain", false, o, []any{""}).reject("broken-chain", "unchecked").at(0, "")
	o = g.single("edge-chain-empty-bstr", fJWS, func(o *obj) { o.set("prev", dig([]byte{})) })
	g.h("edge-chain-element-empty-bstr-cbor", "D3: chain of text / byte strings (CBOR) is well-formed; D6: an empty bstr is no COSE_Sign1: broken-chain", true, o, []any{bs{}}).
		reject("broken-chain", "unchecked").at(0, "")

	// COSE kid corner cases.
	g.h("edge-cose-kid-empty", "D1 (b), D10: a kid is given (empty) and no key bound to iss has it", true,
		coseRaw(c.key, toCBOR(cmap{{cUint(1), cInt(-7)}, {cUint(3), cText(coseCT)}, {cUint(4), cBytes(nil)}}), nil, toCBOR(g.offer("edge-cose-kid-empty", nil))), nil).
		reject("untrusted-key", "absent").note("lower confidence: an empty kid could also be read as malformed (bad-signature); it must not select every key")
	g.h("edge-cose-kid-invalid-utf8", "D1 (b), D10: the kid names no key of iss", true,
		coseRaw(c.key, toCBOR(cmap{{cUint(1), cInt(-7)}, {cUint(3), cText(coseCT)}, {cUint(4), cBytes([]byte{0xff, 0xfe})}}), nil, toCBOR(g.offer("edge-cose-kid-invalid-utf8", nil))), nil).
		reject("untrusted-key", "absent")

	// JSON corner cases of the payload.
	g.pv("payload-iat-leading-zero", "D3: strict JSON numbers (no leading zero)", "", fJWS, func(o *obj) { o.set("iat", raw{j: fmt.Sprintf("0%d", now-30)}) }).at(-1, "")
	g.pv("payload-iat-plus-sign", "D3: strict JSON numbers", "", fJWS, func(o *obj) { o.set("iat", raw{j: fmt.Sprintf("+%d", now-30)}) }).at(-1, "")
	pl := toJSON(g.offer("payload-duplicate-key-escaped", nil))
	pl = append(pl[:len(pl)-1], `,"\u0069ss":"https://coder.example"}`...)
	g.h("payload-duplicate-key-escaped", "D3: duplicate member names compare after unescaping (iss and \\u0069ss)", false, c.jws(pl), nil).
		reject("bad-signature", "absent").at(-1, "")
	g.pv("payload-cbor-duplicate-in-nested", "D3: CBOR free of duplicate keys (inside grant)", "", fCOSE, func(o *obj) {
		o.set("grant", dig([]byte("g")).add("alg", "sha-256"))
	})
	g.pv("payload-grant-val-noncanonical", "D3: base64url with non-canonical bits (Digest val)", "grant", fJWS, func(o *obj) {
		v := b64.EncodeToString(sha([]byte("g"))) // 43 chars; the last carries 4 bits
		o.set("grant", newObj("alg", "sha-256", "val", v[:42]+noncanon(v[42])))
	})
	g.pv("payload-iat-undefined-cbor", "SPEC 1: Time = uint (CBOR undefined is not one)", "iat", fCOSE, func(o *obj) { o.set("iat", raw{c: []byte{0xf7}}) })

	// Exact element size bounds (COSE: the signature has a fixed size).
	for _, tc := range []struct {
		name   string
		size   int
		accept bool
	}{{"bounds-element-65536", 65536, true}, {"bounds-element-65537", 65537, false}} {
		pad := 60000
		var el elem
		for i := 0; i < 4; i++ {
			el = g.single(tc.name, fCOSE, func(o *obj) { o.add("x-pad", bs(bytes.Repeat([]byte{0}, pad))) })
			if len(el.octets) == tc.size {
				break
			}
			pad += tc.size - len(el.octets)
		}
		if len(el.octets) != tc.size {
			panic(fmt.Sprintf("%s: element of %d octets", tc.name, len(el.octets)))
		}
		v := g.h(tc.name, "SPEC 4 Bounds: a signed element of at most 64 KiB (65536 octets)", true, el, nil)
		if tc.accept {
			v.accept("absent")
		} else {
			v.reject("policy", "absent")
		}
	}

	// Chains: an untrusted element's signature is not judged.
	h := path(X, P, C, T)
	h[0].post = func(e elem) any { hh, pp, ss := jwsSplit(e); return jwsJoin(hh, pp, flipChar(ss, 9)) }
	offer, chain, _ := g.build("edge-chain-untrusted-bad-signature", h)
	g.h("edge-chain-untrusted-bad-signature", "D6: an element whose iss has no trusted key is unverifiable, whatever its signature", false, offer, chain).accept("unverifiable")
	// Rejections before step 6 with a chain.
	h = path(A, P, C, T)
	h[2].post = func(e elem) any { hh, pp, ss := jwsSplit(e); return jwsJoin(hh, pp, flipChar(ss, 9)) }
	offer, chain, _ = g.build("edge-chain-offer-bad-signature", h)
	g.h("edge-chain-offer-bad-signature", "D7: a rejection before step 6 prints unchecked", false, offer, chain).reject("bad-signature", "unchecked")
	h = path(A, P, X, T)
	offer, chain, _ = g.build("edge-chain-offer-untrusted", h)
	g.h("edge-chain-offer-untrusted", "D7: a rejection before step 6 prints unchecked", true, offer, chain).reject("untrusted-key", "unchecked")

	// D3: an unknown member may hold any well-formed CBOR, tags included,
	// and is ignored; well-formed is not the same as valid for the tag.
	for _, tc := range []struct {
		name string
		val  []byte
	}{
		{"valid-cbor-unknown-tag0-not-a-date", cTag(0, cText("not a date"))},
		{"valid-cbor-unknown-tag1-text", cTag(1, cText("abc"))},
		{"valid-cbor-unknown-tag1-nested-tag", cTag(1, cTag(1, cUint(0)))},
		{"valid-cbor-unknown-tag2-integer", cTag(2, cUint(0))},
		{"valid-cbor-unknown-unassigned-tag", cTag(1234567, cText("x"))},
	} {
		g.h(tc.name, "D3: an unknown member may hold any well-formed CBOR, tags included, and is ignored", true,
			g.single(tc.name, fCOSE, func(o *obj) { o.add("x-odd", raw{c: tc.val}) }), nil).accept("absent")
	}
	e = g.single("valid-cbor-handoff-unknown-tag1-text", fCOSE, nil)
	g.newV("valid-cbor-handoff-unknown-tag1-text", "SPEC 1 Handoff * text => any; D3: any well-formed CBOR, tags included", "cbor",
		toCBOR(newObj("offer", e, "x-odd", raw{c: cTag(1, cText("abc"))}))).accept("absent").offerDigest(e.octets)
	// Nesting: SPEC lists no depth bound; a well-formed unknown member is ignored.
	deepJ := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	// Issue 13: nesting is capped at 32 levels (handoff.MaxNesting), unknown
	// members included: an exceeded bound, policy. A Handoff too deep never
	// decoded as a map (D7 unchecked, offer null); a payload too deep sits in
	// a Handoff that did (absent, its offer's digest).
	e = g.single("bounds-handoff-unknown-member-depth-40", fJWS, nil)
	g.newV("bounds-handoff-unknown-member-depth-40", "issue 13, SPEC 4 Bounds: nesting past 32 levels rejects with policy", "json",
		toJSON(newObj("offer", e, "x-deep", raw{j: deepJ(40)}))).reject("policy", "unchecked").nullOffer()
	e = g.single("bounds-payload-unknown-member-depth-40", fJWS, func(o *obj) { o.add("x-deep", raw{j: deepJ(40)}) })
	g.h("bounds-payload-unknown-member-depth-40", "issue 13, SPEC 4 Bounds: nesting past 32 levels in a payload rejects with policy", false,
		e, nil).reject("policy", "absent").offerDigest(e.octets)
	g.h("valid-payload-unknown-member-depth-30", "SPEC 1 * text => any", true,
		g.single("valid-payload-unknown-member-depth-30", fCOSE, func(o *obj) {
			v := cUint(0)
			for i := 0; i < 30; i++ {
				v = cArray(v)
			}
			o.add("x-deep", raw{c: v})
		}), nil).accept("absent")

	// B64u is [A-Za-z0-9_-]+: no line breaks inside (a base64 decoder that
	// skips CR and LF must not be used as is).
	g.pv("payload-hop-newline", "SPEC 1 B64u = [A-Za-z0-9_-]+, D3: hop with a line feed inside", "hop", fJWS, func(o *obj) {
		h := o.get("hop").(string)
		o.set("hop", h[:11]+"\n"+h[11:])
	})
	g.pv("payload-hop-crlf-cose", "SPEC 1 B64u, D3: hop with CR LF inside", "hop", fCOSE, func(o *obj) {
		h := o.get("hop").(string)
		o.set("hop", h[:8]+"\r\n"+h[8:])
	})
	g.pv("payload-grant-val-newline", "SPEC 1 B64u, D3: a Digest val with a line feed inside", "grant", fJWS, func(o *obj) {
		v := b64.EncodeToString(sha([]byte("g")))
		o.set("grant", newObj("alg", "sha-256", "val", v[:20]+"\n"+v[20:]))
	})
	g.pv("payload-prev-val-trailing-newline", "SPEC 1 B64u, D3: a Digest val with a trailing line feed", "prev", fCOSE, func(o *obj) {
		o.set("prev", newObj("alg", "sha-256", "val", b64.EncodeToString(sha([]byte("p")))+"\n"))
	})
	ce := g.single("edge-cose-text-with-newline", fCOSE, nil)
	t := ce.asText()
	g.newV("edge-offer-cose-text-with-newline", "SPEC 1 SignedHandoffJson = JwsCompact / B64u, D3; SPEC 4: base64url that does not decode strictly: offer null", "json",
		toJSON(newObj("offer", t[:40]+"\n"+t[40:]))).reject("bad-signature", "unchecked").nullOffer().at(-1, "offer")
	g.newV("edge-offer-newline-only", "SPEC 1 B64u is not empty and has no line feed (found by FuzzParseHandoffJSON)", "json",
		[]byte(`{"offer":"\n"}`)).reject("bad-signature", "unchecked").nullOffer().at(-1, "offer")
	g.newV("edge-offer-crlf-only-cbor", "SPEC 1 B64u (CBOR Handoff, text offer)", "cbor",
		toCBOR(newObj("offer", "\r\n"))).reject("bad-signature", "unchecked").nullOffer().at(-1, "offer")
	h0 := allForm(path(A, P, C, T), fCOSE)
	h0[0].post = func(e elem) any { t := e.asText(); return t[:30] + "\r\n" + t[30:] }
	offer0, chain0, signed0 := g.build("edge-chain-cose-text-with-crlf", h0)
	_ = signed0
	g.h("edge-chain-cose-text-with-crlf", "D6: chain text that is neither a JWS nor (strict) base64url is broken-chain", false, offer0, chain0).
		reject("broken-chain", "unchecked").at(0, "")

	// D5 corners.
	g.category = "replay"
	acc := expect{Result: "accepted", Chain: "absent"}
	file := func(name string, offer elem) string {
		f := name + ".json"
		g.writeFile(f, toJSON(handoffTree(offer, nil)))
		return f
	}
	e1 := g.single("seq-eq-wrong-aud", fJWS, nil)
	e2 := g.single("seq-eq-wrong-aud", fJWS, func(o *obj) { o.set("aud", P) })
	acc.Offer = digestOf(e1.octets)
	g.h("replay-same-hop-wrong-audience", "draft steps 2 before 4: a second offer for another audience fails step 2, not equivocation", false, e2, nil).
		reject("wrong-audience", "absent").before(file("seq-eq-wrong-aud-first", e1), now, "", acc)
	e1 = g.single("seq-eq-bad-sig", fJWS, nil)
	e2 = g.single("seq-eq-bad-sig", fJWS, func(o *obj) { o.set("task", "x") })
	hh, pp, ss := jwsSplit(e2)
	acc.Offer = digestOf(e1.octets)
	g.h("replay-same-hop-bad-signature", "draft step 1 before 4: a forged second offer is bad-signature, not equivocation", false, jwsJoin(hh, pp, flipChar(ss, 9)), nil).
		reject("bad-signature", "absent").before(file("seq-eq-bad-sig-first", e1), now, "", acc)
	e1 = g.single("seq-retrans-dialog", fJWS, nil)
	acc.Offer = digestOf(e1.octets)
	g.h("replay-retransmission-dialog-mismatch", "draft steps 4 before 5: a retransmission is not processed again (no dialog check)", false, e1, nil).
		outcome("retransmission", "", "absent").dialog("another-dialog").before(file("seq-retrans-dialog-first", e1), now, "", acc)
}
