package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
)

// The vectors of the payload data model and the Handoff's shape.

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
