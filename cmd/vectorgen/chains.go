package main

import (
	"bytes"
	"fmt"
)

// The vectors of chains: qualities, links and broken elements.

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
