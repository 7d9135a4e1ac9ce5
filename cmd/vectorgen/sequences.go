package main

import (
	"bytes"
	"fmt"
	"strings"
)

// The vectors of bounds, of sequences (retransmission, equivocation,
// copies) and of edge cases.

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
		outcome("retransmission", "", "absent").before(f, now, "", acc).at_now(now + 240) // after exp (now+210), before exp + skew: still remembered
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
		outcome("equivocation", "equivocation", "absent").before(f, now, "", acc).at_now(now + 240) // both expired; the first still remembered
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
		reject("untrusted-key", "absent").alsoAccept("bad-signature").note("lower confidence: an empty kid could also be read as malformed (bad-signature); it must not select every key")
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
