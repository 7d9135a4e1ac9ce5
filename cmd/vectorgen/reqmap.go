package main

import (
	"slices"
	"sort"
	"strings"
)

// The requirement rows (conformance/requirements.yaml) each kit vector
// checks, from its category, its name and the rule it cites. The draft's
// receiving steps carry no keyword of their own; their one normative
// sentence is R-RECV-1 ("the delegate SHOULD send a rejected status with
// the reason shown"), which every rejection checks: the reason is the one
// shown. The rows of the MUSTs the steps rest on (signatures, trust,
// freshness, replay, chains, bounds) are named where a vector checks them.

type reqSet map[string]bool

func (s reqSet) add(ids ...string) {
	for _, id := range ids {
		s[id] = true
	}
}

func (s reqSet) list() []string {
	out := make([]string, 0, len(s))
	for id := range s {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func has(s string, parts ...string) bool {
	return slices.ContainsFunc(parts, func(p string) bool { return strings.Contains(s, p) })
}

// requirementsOf names the rows a verify vector checks.
func requirementsOf(v *vectorOut) []string {
	s := reqSet{}
	name, rule := v.Name, v.Rule
	rejected := v.Expected.Result == "rejected"
	for _, b := range v.Before {
		rejected = rejected || b.Expected.Result == "rejected"
	}
	if rejected {
		s.add("R-RECV-1")
	}
	switch v.Category {
	case "valid":
		s.add("R-SIGN-1")
		if has(name, "unknown-member") {
			s.add("R-MODEL-1")
		}
		if has(name, "typ") {
			s.add("R-JWS-1", "R-SEC-3")
		}
		if has(name, "content-type") {
			s.add("R-COSE-1", "R-SEC-3")
		}
		if has(name, "no-kid") {
			s.add("R-COSE-2")
		}
		if has(name, "second-key") {
			s.add("R-TRUST-1")
		}
		if has(name, "iat-at-skew", "exp-now-plus-1") {
			s.add("R-FRESH-1", "R-FRESH-3")
		}
		if has(name, "lifetime-300") {
			s.add("R-FRESH-4", "R-FRESH-5")
		}
	case "jws-form":
		s.add("R-JWS-1")
		if has(name, "crit") {
			s.add("R-JWS-2")
		}
		if has(name, "alg") {
			s.add("R-JWS-3", "R-JWS-4")
		}
		if has(name, "typ", "cty") {
			s.add("R-SEC-3")
		}
	case "cose-form":
		s.add("R-COSE-1")
		if has(name, "alg") {
			s.add("R-COSE-3")
		}
		if has(name, "content-type", "ctype", "-ct-") {
			s.add("R-SEC-3")
		}
		if has(name, "kid") {
			s.add("R-COSE-2", "R-TRUST-1")
		}
	case "payload", "handoff":
		s.add("R-SIGN-1")
		if has(rule, "Digest") || has(name, "digest", "grant", "prev") {
			s.add("R-DIGEST-1")
		}
		if has(rule, "unknown member") || has(name, "unknown-member") {
			s.add("R-MODEL-1")
		}
		if has(name, "no-offer", "unsigned", "alg-none") {
			s.add("R-SIGN-2")
		}
		if has(name, "kind") {
			s.add("R-REFS-3")
		}
	case "edge":
		s.add("R-SIGN-1")
		if has(name, "kid") {
			s.add("R-TRUST-1")
		}
		if has(name, "chain") {
			s.add("R-CHAIN-1")
		}
	case "untrusted-key":
		s.add("R-TRUST-1")
		if has(rule, "D2") || has(name, "alg") {
			s.add("R-TRUST-2")
		}
	case "stale":
		if has(name, "at-skew", "now-plus") {
			s.add("R-FRESH-3") // the default skew: 60 s
		}
		if has(name, "lifetime-300") {
			s.add("R-FRESH-5") // the default maximum lifetime: 300 s
		}
		switch {
		case has(rule, "exp <= now"):
			s.add("R-FRESH-2")
		case has(rule, "max lifetime", "lifetime"):
			s.add("R-FRESH-4")
		default:
			s.add("R-FRESH-1")
		}
	case "wrong-audience", "check-order":
		s.add("R-RECV-1")
		if v.Expected.Reason != nil && *v.Expected.Reason == "untrusted-key" {
			s.add("R-TRUST-1")
		}
	case "replay":
		s.add("R-REPLAY-1")
		switch v.Expected.Result {
		case "retransmission":
			s.add("R-ASK-3")
			if has(name, "copy") {
				s.add("R-FORK-4") // a copy is no equivocation (SPEC D5, the row's departure)
			}
			if has(name, "after-exp") {
				s.add("R-FRESH-2")
			}
		case "equivocation":
			s.add("R-FORK-4")
		}
	case "replay-memory":
		s.add("R-REPLAY-3")
	case "chain-valid":
		s.add("R-SIGN-1", "R-DIGEST-4")
		if name == "chain-full-16" {
			s.add("R-CHAIN-4", "R-CHAIN-5")
		}
	case "chain-element":
		s.add("R-SIGN-1", "R-CHAIN-1")
	case "chain-broken":
		s.add("R-DIGEST-4")
		if has(name, "unknown-alg") {
			s.add("R-DIGEST-3")
		}
	case "chain-quality":
		if v.Expected.Chain == "unverifiable" || has(name, "unverifiable", "untrusted") {
			s.add("R-CHAIN-1")
		}
		if v.Options.RequireFullChain {
			s.add("R-CHAIN-6")
		}
	case "cycle":
		s.add("R-CHAIN-2")
	case "too-deep":
		s.add("R-CHAIN-4", "R-CHAIN-5")
	case "bounds":
		s.add("R-SEC-4")
	case "origins":
		s.add("R-CHAIN-6")
	case "refs":
		s.add("R-REFS-4")
		if len(v.Options.RefOctets) > 0 && has(name, "digest") {
			s.add("R-DIGEST-1")
		}
	}
	if has(rule, "D2") {
		s.add("R-TRUST-2")
	}
	if has(rule, "Bounds", "issue 13") {
		s.add("R-SEC-4")
	}
	if len(s) == 0 {
		s.add("R-SIGN-1")
	}
	if v.Options.RequireFullChain && !s["R-CHAIN-6"] {
		s.add("R-CHAIN-6")
	}
	return s.list()
}

// statusRequirements names the rows a status vector checks (D9).
func statusRequirements(st *statusOut) []string {
	s := reqSet{"R-SIGN-1": true}
	name := st.Name
	switch {
	case has(name, "typ"):
		s.add("R-JWS-1", "R-SEC-3")
	case has(name, "crit"):
		s.add("R-JWS-2")
	case has(name, "unknown-member"):
		s.add("R-MODEL-1")
	case has(name, "detail"):
		s.add("R-SEC-4")
	case has(name, "key", "kid", "signed-by"):
		s.add("R-TRUST-1")
	}
	return s.list()
}

var (
	reqSignOffer  = []string{"R-SIGN-1", "R-JWS-5", "R-COSE-3"}
	reqPassOn     = []string{"R-SIGN-1", "R-DIGEST-4", "R-MODEL-2"}
	reqSignStatus = []string{"R-SIGN-1"}
)
