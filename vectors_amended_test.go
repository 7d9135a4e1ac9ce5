package handoff_test

import "testing"

// Expectations of testdata/vectors that rules amended after the vectors
// were generated change, until internal/vectorgen writes them anew: each
// entry applies only while the manifest still holds the old expectation
// (a regenerated manifest is compared as it is), and an entry that names
// no vector fails. Delete this file once the vectors are regenerated with
// these expectations.

// vecAbsentD7 are the Handoffs that decode as a map without a chain
// member but break the CDDL (no offer, an offer of the wrong type or
// form, an offer that fails step 1): D7 as amended prints "absent" for
// them, where the vectors say "unchecked".
var vecAbsentD7 = []string{
	"cose-text-base64-padded-in-json",
	"edge-offer-cose-text-with-newline",
	"edge-offer-crlf-only-cbor",
	"edge-offer-newline-only",
	"handoff-cbor-cose-as-text",
	"handoff-cbor-int-key",
	"handoff-no-offer",
	"handoff-no-offer-cbor",
	"handoff-offer-array",
	"handoff-offer-bstr-tagged-cbor",
	"handoff-offer-empty-string",
	"handoff-offer-jws-with-spaces",
	"handoff-offer-not-base64url",
	"handoff-offer-null",
	"handoff-offer-number",
	"handoff-offer-number-cbor",
	"handoff-offer-object",
	"handoff-offer-two-part-text",
	"jws-alg-none-unsigned",
	"jws-four-parts",
	"jws-json-serialization",
	"jws-padding-header",
	"jws-padding-payload",
	"jws-padding-signature",
	"jws-standard-alphabet",
	"jws-two-parts",
	"jws-whitespace-inside",
}

// vecDepthBound are the vectors whose unknown member nests 40 deep, past
// MaxNesting (32; issue 13, decision 49): rejected with "policy", an
// exceeded bound. The Handoff itself too deep never decoded as a map
// (D7 "unchecked", SPEC 4 offer null); the payload too deep is in a
// Handoff that did ("absent", its offer's digest).
var vecDepthBound = map[string]vecExpect{
	"valid-handoff-unknown-member-depth-40": {Result: "rejected", Reason: ptr("policy"), Chain: "unchecked"},
	"valid-payload-unknown-member-depth-40": {Result: "rejected", Reason: ptr("policy"), Chain: "absent", Offer: ptr("WaIgXgEQS8QpsGaYFUcERFh_O9BWfM0gvpjdqByC7kU")},
}

// vecAmended returns the expectation to check v against.
func vecAmended(t *testing.T, v *vecCase) vecExpect {
	t.Helper()
	want := v.Expected
	for _, n := range vecAbsentD7 {
		if n == v.Name && want.Chain == "unchecked" {
			want.Chain = "absent"
		}
	}
	if w, ok := vecDepthBound[v.Name]; ok && want.Result == "accepted" {
		want = w
	}
	return want
}

// TestVecAmendedNamesVectors: every amended expectation names a vector.
func TestVecAmendedNamesVectors(t *testing.T) {
	m, _ := vecLoad(t)
	have := map[string]bool{}
	for _, v := range m.Vectors {
		have[v.Name] = true
	}
	for _, n := range vecAbsentD7 {
		if !have[n] {
			t.Errorf("vecAbsentD7 names %q, which is not a vector", n)
		}
	}
	for n := range vecDepthBound {
		if !have[n] {
			t.Errorf("vecDepthBound names %q, which is not a vector", n)
		}
	}
}
