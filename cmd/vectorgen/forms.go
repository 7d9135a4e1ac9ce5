package main

import (
	"bytes"
	"encoding/base64"
	"regexp"
	"strings"
)

// The vectors of the signed forms and the checks around them: freshness,
// audience and trust, JWS and COSE structure.

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
