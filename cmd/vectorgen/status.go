package main

import "strings"

// Status vectors (D9): a signed status judged against the offer it
// answers, on its own (VerifyStatus; handoff verify-status).

func statusObj(offer []byte, iss, aud string, iat int64, state string) *obj {
	return newObj("v", 1, "type", "status", "offer", dig(offer), "iss", iss, "aud", aud, "iat", iat, "state", state)
}

func (g *gen) statusCases() {
	coder, tester, out := g.agents["coder"], g.agents["tester"], g.agents["outsider"]
	// The offer answered: coder (delegator) -> tester (delegate).
	offer := coder.jws(toJSON(offerObj(hop("status-offer", 0), C, T, now-30, now+210)))
	g.writeFile("status/offer.jws", offer.octets)
	offerCOSE := coder.cose(toCBOR(offerObj(hop("status-offer-cose", 0), C, T, now-30, now+210)))
	g.writeFile("status/offer.cose", offerCOSE.octets)

	add := func(name, rule string, e elem, asText bool, offerFile string, result, reason, state string) *statusOut {
		file := "status/" + name
		data := e.octets
		switch {
		case !e.cose:
			file += ".jws"
		case asText:
			file += ".cose.b64"
			data = []byte(e.asText())
		default:
			file += ".cose"
		}
		g.writeFile(file, data)
		s := statusOut{Name: name, File: file, Offer: offerFile, Rule: rule, Now: now}
		s.Expected.Result, s.Expected.State = result, state
		if reason != "" {
			s.Expected.Reason = str(reason)
		}
		g.statuses = append(g.statuses, s)
		return &g.statuses[len(g.statuses)-1]
	}
	st := func(iss, aud, state string, mut func(*obj)) *obj {
		o := statusObj(offer.octets, iss, aud, now-10, state)
		if mut != nil {
			mut(o)
		}
		return o
	}
	ok := func(name, rule string, e elem, asText bool, state string) {
		add(name, rule, e, asText, "status/offer.jws", "verified", "", state)
	}
	no := func(name, rule string, e elem, reason string) {
		add(name, rule, e, false, "status/offer.jws", "rejected", reason, "")
	}

	ok("status-accepted-jws", "D9: the delegate's accepted status", tester.sign(fJWS, st(T, C, "accepted", nil)), false, "accepted")
	ok("status-completed-cose", "D9: COSE status, raw tagged COSE_Sign1", tester.sign(fCOSE, st(T, C, "completed", func(o *obj) {
		o.set("refs", []any{ref("digest", "result")})
	})), false, "completed")
	ok("status-failed-cose-text", "D9: COSE status as base64url text", tester.sign(fCOSE, st(T, C, "failed", nil)), true, "failed")
	ok("status-rejected-with-reason", "D9, draft: rejected with a listed reason", tester.sign(fJWS, st(T, C, "rejected", func(o *obj) { o.set("reason", "stale") })), false, "rejected")
	ok("status-rejected-unlisted-reason", "SPEC 1: Reason / text", tester.sign(fJWS, st(T, C, "rejected", func(o *obj) { o.set("reason", "x-busy") })), false, "rejected")
	ok("status-canceled-by-delegator", "D9: canceled comes from offer.iss to offer.aud", coder.sign(fJWS, st(C, T, "canceled", nil)), false, "canceled")
	ok("status-does-not-expire", "SPEC 4: statuses do not expire", tester.sign(fJWS, st(T, C, "completed", func(o *obj) { o.set("iat", now-1000000) })), false, "completed")
	ok("status-iat-at-skew", "SPEC 4: iat = now + skew is not later than now + skew", tester.sign(fJWS, st(T, C, "accepted", func(o *obj) { o.set("iat", now+60) })), false, "accepted")
	ok("status-detail-4096", "SPEC 4 Bounds: detail of at most 4 KiB", tester.sign(fJWS, st(T, C, "failed", func(o *obj) { o.set("detail", strings.Repeat("d", 4096)) })), false, "failed")
	ok("status-unknown-members", "SPEC 1: unknown members ignored", tester.sign(fCOSE, st(T, C, "accepted", func(o *obj) { o.add("x-extra", raw{c: cTag(1, cUint(1))}) })), false, "accepted")
	add("status-for-cose-offer", "D9: status.offer is the digest of the COSE offer's octets", tester.sign(fJWS, func() *obj {
		o := statusObj(offerCOSE.octets, T, C, now-10, "accepted")
		return o
	}()), false, "status/offer.cose", "verified", "", "accepted")

	// D9: "rejected" with reason wrong-audience comes from the agent the
	// offer reached by mistake (any trusted agent but offer.iss), to
	// offer.iss.
	planner := g.agents["planner"]
	wrongAud := func(o *obj) { o.set("reason", "wrong-audience") }
	ok("status-wrong-audience-third-party", "D9: rejected/wrong-audience signed by the agent the offer reached by mistake, to offer.iss", planner.sign(fJWS, st(P, C, "rejected", wrongAud)), false, "rejected")
	ok("status-wrong-audience-by-delegate", "D9: the offer's own delegate may say wrong-audience too", tester.sign(fCOSE, st(T, C, "rejected", wrongAud)), false, "rejected")
	no("status-wrong-audience-untrusted", "D9, D1 (b): the third party needs a trusted key", out.sign(fJWS, st(X, C, "rejected", wrongAud)), "untrusted-key")
	no("status-wrong-audience-not-to-iss", "D9: a wrong-audience status goes to offer.iss", planner.sign(fJWS, st(P, T, "rejected", wrongAud)), "wrong-audience")
	no("status-wrong-audience-by-iss", "D9: offer.iss cannot answer its own offer", coder.sign(fJWS, st(C, C, "rejected", wrongAud)), "")
	no("status-third-party-other-reason", "D9: a third party may send only rejected/wrong-audience", planner.sign(fJWS, st(P, C, "rejected", func(o *obj) { o.set("reason", "policy") })), "")
	no("status-third-party-failed", "D9: a third party may send only rejected/wrong-audience", planner.sign(fJWS, st(P, C, "failed", wrongAud)), "")
	no("status-canceled-by-delegate", "D9: canceled must come from offer.iss", tester.sign(fJWS, st(T, C, "canceled", nil)), "")
	no("status-completed-by-delegator", "D9: completed must come from offer.aud", coder.sign(fJWS, st(C, T, "completed", nil)), "")
	no("status-wrong-aud", "D9: status.aud is the other party", tester.sign(fJWS, st(T, P, "accepted", nil)), "")
	no("status-wrong-offer-digest", "D9: status.offer is the offer's handoff digest", tester.sign(fJWS, statusObj([]byte("another offer"), T, C, now-10, "accepted")), "")
	no("status-offer-digest-of-payload", "D9, SPEC 2: the digest is over the signed octets, not the payload", tester.sign(fJWS, statusObj(mustDecodeJWSPayloadBytes(offer), T, C, now-10, "accepted")), "")
	no("status-iat-future", "SPEC 4: a status whose iat is later than now + skew is rejected", tester.sign(fJWS, st(T, C, "accepted", func(o *obj) { o.set("iat", now+61) })), "")
	no("status-untrusted-iss", "D9, D1 (b): no key bound to status.iss", out.sign(fJWS, st(X, C, "accepted", nil)), "untrusted-key")
	no("status-kid-not-bound", "D9, D1 (b): the kid names no key of status.iss", jwsRaw(out.key, jwsHeader(out.kid), toJSON(st(T, C, "accepted", nil))), "untrusted-key")
	no("status-wrong-key", "D9, D1 (c): another key signed under the delegate's kid", jwsRaw(out.key, jwsHeader(tester.kid), toJSON(st(T, C, "accepted", nil))), "bad-signature")
	e := tester.sign(fJWS, st(T, C, "accepted", nil))
	h, p, s := jwsSplit(e)
	no("status-flip-signature", "D9, D1 (c)", jwsJoin(h, p, flipChar(s, 7)), "bad-signature")
	no("status-type-offer", "D9: type status", tester.sign(fJWS, st(T, C, "accepted", func(o *obj) { o.set("type", "offer") })), "bad-signature")
	no("status-state-unknown", "SPEC 1: State is one of five", tester.sign(fJWS, st(T, C, "done", nil)), "bad-signature")
	no("status-state-expired", "draft Lifecycle: expired is local, never sent", tester.sign(fJWS, st(T, C, "expired", nil)), "bad-signature")
	no("status-refs-empty", "D3: an empty refs array", tester.sign(fJWS, st(T, C, "completed", func(o *obj) { o.set("refs", []any{}) })), "bad-signature")
	no("status-offer-digest-extra-member", "SPEC 1: Digest is closed", tester.sign(fJWS, st(T, C, "accepted", func(o *obj) { o.set("offer", dig(offer.octets).add("x", 1)) })), "bad-signature")
	no("status-iat-float", "D3: Time is an integer", tester.sign(fJWS, st(T, C, "accepted", func(o *obj) { o.set("iat", raw{j: "1767225590.0"}) })), "bad-signature")
	no("status-v-2", "D1 (a): v = 1", tester.sign(fCOSE, st(T, C, "accepted", func(o *obj) { o.set("v", 2) })), "bad-signature")
	no("status-crit", "SPEC 2: no crit", jwsRaw(tester.key, `{"alg":"ES256","crit":["exp"],"kid":"`+tester.kid+`","typ":"agent-handoff+jwt"}`, toJSON(st(T, C, "accepted", nil))), "bad-signature")
	no("status-typ-jwt", "SPEC 2: typ agent-handoff+jwt", jwsRaw(tester.key, `{"alg":"ES256","kid":"`+tester.kid+`","typ":"JWT"}`, toJSON(st(T, C, "accepted", nil))), "bad-signature")
	no("status-detail-4097", "SPEC 4 Bounds: a detail over 4 KiB rejects with policy", tester.sign(fJWS, st(T, C, "failed", func(o *obj) { o.set("detail", strings.Repeat("d", 4097)) })), "policy")
	no("status-detail-number", "SPEC 1: detail is text", tester.sign(fJWS, st(T, C, "failed", func(o *obj) { o.set("detail", 5) })), "bad-signature")
	no("status-reason-number", "SPEC 1: reason is text", tester.sign(fJWS, st(T, C, "rejected", func(o *obj) { o.set("reason", 5) })), "bad-signature")
	no("status-missing-offer", "SPEC 1: offer is required", tester.sign(fJWS, st(T, C, "accepted", func(o *obj) { o.del("offer") })), "bad-signature")
	add("status-offer-is-status", "D9: the status answers an offer (its own digest is not an offer)", tester.sign(fJWS, st(T, C, "accepted", nil)), false, "status/status-accepted-jws.jws", "rejected", "", "").
		Note = "the element given as the offer is itself a status: VerifyStatus cannot read an offer from it"
}
