package main

import "encoding/hex"

func hexOf(s string) string { return hex.EncodeToString([]byte(s)) }

// policies are the vectors of the receiver's local policy: a replay
// memory that began recently (reason "replay"), references that policy
// requires (step 7: "ref-mismatch", "unverifiable-ref") and the origins
// trusted to start a full chain.
func (g *gen) policies() {
	g.category = "replay-memory"
	// Draft "Freshness and Replay": a delegate that lost its memory cannot
	// tell whether it saw an offer issued before the memory began.
	g.h("replay-memory-lost", "draft Freshness and Replay: an offer issued before the replay memory began is rejected with replay", false,
		g.single("replay-memory-lost", fJWS, nil), nil).reject("replay", "absent").at(-1, "iat").memorySince(now - 10)
	g.h("replay-memory-lost-iat-at-start", "draft Freshness and Replay: iat in the memory's first second is not after it: replay", false,
		g.single("replay-memory-lost-iat-at-start", fJWS, func(o *obj) { o.set("iat", now-10) }), nil).reject("replay", "absent").memorySince(now - 10)
	g.h("replay-memory-new-offer", "draft Freshness and Replay: an offer issued after the memory began is taken", false,
		g.single("replay-memory-new-offer", fJWS, func(o *obj) { o.set("iat", now-5) }), nil).accept("absent").memorySince(now - 10)
	g.h("replay-memory-stale-first", "draft steps 3 before 4: a stale offer is stale, whatever the memory", false,
		g.single("replay-memory-stale-first", fJWS, func(o *obj) { o.set("iat", now-400).set("exp", now-100) }), nil).reject("stale", "absent").memorySince(now - 10)

	g.category = "refs"
	report := "the report, version 1\n"
	withRef := func(name string, f form, kind string) elem {
		return g.single(name, f, func(o *obj) { o.set("refs", []any{ref(kind, report)}) })
	}
	g.h("refs-digest-verified", "draft step 7, SPEC 5: a required digest ref whose octets match", false,
		withRef("refs-digest-verified", fJWS, "digest"), nil).accept("absent").refs(true, report)
	g.h("refs-digest-mismatch", "draft step 7: a required ref whose octets do not match its digest: ref-mismatch", false,
		withRef("refs-digest-mismatch", fJWS, "digest"), nil).reject("ref-mismatch", "absent").refs(true, "the report, version 2\n")
	g.h("refs-digest-mismatch-cose", "draft step 7: a required ref whose octets do not match its digest: ref-mismatch", true,
		withRef("refs-digest-mismatch-cose", fCOSE, "digest"), nil).reject("ref-mismatch", "absent").refs(true, "the report, version 2\n")
	g.h("refs-digest-no-octets", "draft step 7: a required ref that cannot be checked (no octets, nothing to fetch): unverifiable-ref", false,
		withRef("refs-digest-no-octets", fJWS, "digest"), nil).reject("unverifiable-ref", "absent").refs(true, "")
	g.h("refs-unknown-kind", "draft step 7: a required ref of a kind this receiver cannot check: unverifiable-ref", false,
		withRef("refs-unknown-kind", fJWS, "https://kinds.example/unknown"), nil).reject("unverifiable-ref", "absent").refs(true, report)
	g.h("refs-not-required", "draft step 7: references that local policy does not require do not reject", false,
		withRef("refs-not-required", fJWS, "digest"), nil).accept("absent").refs(false, "the report, version 2\n")
	g.h("refs-checked-after-chain", "draft steps 6 then 7: a broken chain is reported before a mismatching ref", false,
		withRef("refs-checked-after-chain", fJWS, "digest"), []any{"not-a-jws"}).reject("broken-chain", "unchecked").refs(true, "the report, version 2\n")

	// Salted digests (SPEC 5): SHA-256 of the salt then the octets; the
	// salt travels beside the offer, never in it. One salt length, 32
	// octets (decision 98): a salt of the draft's minimum, 16, cannot be
	// checked, since with salts of several lengths the same dig verifies
	// other splits of one concatenation.
	salted := func(name string, saltLen int) (elem, string) {
		salt := sha(append([]byte("salt/"+name), 0))
		for len(salt) < saltLen {
			salt = append(salt, sha(salt)...)
		}
		salt = salt[:saltLen]
		r := newObj("kind", "salted-digest", "dig", dig(append(append([]byte(nil), salt...), report...)))
		return g.single(name, fJWS, func(o *obj) { o.set("refs", []any{r}) }), string(salt)
	}
	e, salt := salted("refs-salted-verified", 32)
	g.h("refs-salted-verified", "draft step 7, SPEC 5: a required salted-digest ref, its 32-octet salt and octets at hand", false, e, nil).
		accept("absent").refs(true, report).refSalt(salt)
	e, salt = salted("refs-salted-other-octets", 32)
	g.h("refs-salted-other-octets", "draft step 7, SPEC 5: a salted-digest ref whose octets do not match: ref-mismatch", false, e, nil).
		reject("ref-mismatch", "absent").refs(true, "the report, version 2\n").refSalt(salt)
	e, salt = salted("refs-salted-16-octet-salt", 16)
	g.h("refs-salted-16-octet-salt", "SPEC 5 as decision 98 amends it: a salt is 32 octets; one of the draft's minimum, 16, cannot be checked: unverifiable-ref", false, e, nil).
		reject("unverifiable-ref", "absent").refs(true, report).refSalt(salt).
		note("departs from the draft (salt of at least 16 octets), by decision 98: the salt/octets boundary is not signed")

	g.category = "origins"
	offer, chain, _ := g.build("origins-trusted", path(A, P, C, T))
	g.h("origins-trusted", "draft Truncated Chains: a full chain started by a trusted origin", false, offer, chain).
		accept("full").full().origins(A)
	offer, chain, _ = g.build("origins-untrusted", path(A, P, C, T))
	g.h("origins-untrusted", "draft Truncated Chains: a full chain whose first offer no trusted origin issued: policy", false, offer, chain).
		reject("policy", "full").full().origins(P)
	g.h("origins-no-prev", "draft Truncated Chains: an offer with no prev starts the chain: its iss must be an origin", false,
		g.single("origins-no-prev", fJWS, nil), nil).reject("policy", "absent").full().origins(A)
	g.h("origins-no-prev-trusted", "draft Truncated Chains: an offer with no prev whose iss is a trusted origin", false,
		g.single("origins-no-prev-trusted", fJWS, nil), nil).accept("absent").full().origins(C)
}

func (v *V) memorySince(t int64) *V { v.out.Options.MemorySince = t; return v }

func (v *V) origins(ids ...string) *V { v.out.Options.Origins = ids; return v }

// refSalt sets the salt of ref 0 (its octets are given by refs).
func (v *V) refSalt(salt string) *V {
	v.out.Options.RefSalts = map[string]string{"0": hexOf(salt)}
	return v
}

// refs sets step 7's policy: required or not, and the octets of ref 0
// ("" for none at hand).
func (v *V) refs(required bool, octets string) *V {
	v.out.Options.RequireRefs = required
	if octets != "" {
		v.out.Options.RefOctets = map[string]string{"0": octets}
	}
	return v
}
