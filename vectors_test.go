package handoff_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/refs"
	"github.com/quantumlearningmachines/handoff/trust"
)

// The vectors under testdata/vectors are written by
// go run ./cmd/vectorgen -out testdata/vectors; see the README there.

const vecDir = "testdata/vectors"

type vecExpect struct {
	Result     string   `json:"result"`
	Reason     *string  `json:"reason"`
	Chain      string   `json:"chain"`
	Offer      *string  `json:"offer"`
	Index      *int     `json:"index"`
	Member     *string  `json:"member"`
	AlsoAccept []string `json:"also_accept"`
}

type vecStep struct {
	File     string    `json:"file"`
	Now      int64     `json:"now"`
	Dialog   string    `json:"dialog"`
	Expected vecExpect `json:"expected"`
}

type vecCase struct {
	Name     string `json:"name"`
	Category string `json:"category"`
	File     string `json:"file"`
	Rule     string `json:"rule"`
	Me       string `json:"me"`
	Now      int64  `json:"now"`
	Dialog   string `json:"dialog"`
	Options  struct {
		MaxChain         int               `json:"max_chain"`
		RequireFullChain bool              `json:"require_full_chain"`
		Origins          []string          `json:"origins"`
		RequireRefs      bool              `json:"require_refs"`
		RefOctets        map[string]string `json:"ref_octets"`
		RefSalts         map[string]string `json:"ref_salts"`
		MemorySince      int64             `json:"memory_since"`
	} `json:"options"`
	Before   []vecStep `json:"before"`
	Expected vecExpect `json:"expected"`
	Note     string    `json:"note"`
}

type vecStatus struct {
	Name     string `json:"name"`
	File     string `json:"file"`
	Offer    string `json:"offer"`
	Rule     string `json:"rule"`
	Now      int64  `json:"now"`
	Expected struct {
		Result string  `json:"result"`
		Reason *string `json:"reason"`
		State  string  `json:"state"`
	} `json:"expected"`
	Note string `json:"note"`
}

type vecManifest struct {
	Comment []string `json:"comment"`
	Agents  []struct {
		ID      string `json:"id"`
		Key     string `json:"key"`
		Trusted bool   `json:"trusted"`
	} `json:"agents"`
	Trust    string      `json:"trust"`
	Skew     int         `json:"skew"`
	MaxLife  int         `json:"max_lifetime"`
	Vectors  []vecCase   `json:"vectors"`
	Statuses []vecStatus `json:"statuses"`
}

func vecLoad(t testing.TB) (*vecManifest, *trust.Config) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vecDir, "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m vecManifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("vectors.json: %v", err)
	}
	keys, err := trust.Load(filepath.Join(vecDir, m.Trust))
	if err != nil {
		t.Fatal(err)
	}
	return &m, keys
}

func vecRead(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vecDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func vecDescribe(res *handoff.Result) string {
	if res == nil {
		return "<nil result>"
	}
	d := "null"
	if res.OfferDigest != nil {
		d = base64.RawURLEncoding.EncodeToString(res.OfferDigest.Val)
	}
	s := fmt.Sprintf("result=%s reason=%q chain=%s offer=%s", res.Outcome, res.Reason, res.ChainQuality, d)
	if res.Err != nil {
		s += fmt.Sprintf(" index=%d member=%q err=%v", res.Err.Index, res.Err.Member, res.Err)
	}
	return s
}

// vecCheck compares one Receive result with the manifest's expectation.
func vecCheck(t *testing.T, label string, v *vecCase, res *handoff.Result, err error, want vecExpect) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s %s (%s)\n  rule: %s\n  %s\n  got:  %s", v.Name, label, v.File, v.Rule, fmt.Sprintf(format, args...), vecDescribe(res))
	}
	if res == nil {
		t.Fatalf("%s %s: Receive returned no result: %v", v.Name, label, err)
	}
	if string(res.Outcome) != want.Result {
		fail("want result %s", want.Result)
	}
	wantReason := ""
	if want.Reason != nil {
		wantReason = *want.Reason
	}
	if string(res.Reason) != wantReason && !slices.Contains(want.AlsoAccept, string(res.Reason)) {
		fail("want reason %q", wantReason)
	}
	switch res.Outcome {
	case handoff.Rejected, handoff.Equivocation:
		if res.Err == nil {
			fail("a %s result has no *CheckError", res.Outcome)
			break
		}
		var ce *handoff.CheckError
		if !errors.As(err, &ce) || ce != res.Err {
			fail("Receive's error %v is not Result.Err", err)
		}
		if res.Offer != nil && res.Err.Hop != res.Offer.Hop {
			fail("the CheckError does not name the offer's hop %q (got %q)", res.Offer.Hop, res.Err.Hop)
		}
		if res.Err.Reason != res.Reason {
			fail("CheckError.Reason %q differs from Result.Reason %q", res.Err.Reason, res.Reason)
		}
		if wantReason != "" && res.Reason == handoff.Reason(wantReason) {
			s := handoff.Reason(wantReason).Sentinel()
			if s == nil || !errors.Is(err, s) {
				fail("errors.Is(err, sentinel of %q) is false", wantReason)
			}
		}
	default:
		if res.Err != nil || err != nil {
			fail("a %s result carries an error: %v", res.Outcome, err)
		}
	}
	if string(res.ChainQuality) != want.Chain {
		fail("want chain %s", want.Chain)
	}
	switch {
	case want.Offer == nil && res.OfferDigest != nil:
		fail("want offer digest null")
	case want.Offer != nil && res.OfferDigest == nil:
		fail("want offer digest %s", *want.Offer)
	case want.Offer != nil && (res.OfferDigest.Alg != handoff.AlgSHA256 || base64.RawURLEncoding.EncodeToString(res.OfferDigest.Val) != *want.Offer):
		fail("want offer digest %s", *want.Offer)
	}
	if want.Index != nil && res.Err != nil && res.Err.Index != *want.Index {
		fail("want the failure at index %d (-1: the offer)", *want.Index)
	}
	if want.Member != nil && res.Err != nil && !strings.HasPrefix(res.Err.Member, *want.Member) {
		fail("want the failure to name member %q", *want.Member)
	}
}

// TestVectors runs each vector of testdata/vectors/vectors.json through a
// fresh Receiver configured as the vector says.
func TestVectors(t *testing.T) {
	m, keys := vecLoad(t)
	runVectors(t, m, keys, nil)
}

// TestVectorsWithChainCache runs every vector twice over with one
// ChainCache shared by all their receivers (issue 19): the second pass
// finds every verified chain element in the cache, and every verdict is
// still the vector's. What the cache keeps must never change one.
func TestVectorsWithChainCache(t *testing.T) {
	m, keys := vecLoad(t)
	cache := handoff.NewChainCache(4096, 64<<20)
	for pass := range 2 {
		t.Run(fmt.Sprint("pass-", pass+1), func(t *testing.T) { runVectors(t, m, keys, cache) })
	}
	if s := cache.Stats(); s.Hits == 0 || s.Entries == 0 {
		t.Fatalf("the cache was not used: %+v", s)
	}
}

func runVectors(t *testing.T, m *vecManifest, keys *trust.Config, cache *handoff.ChainCache) {
	if len(m.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for i := range m.Vectors {
		v := &m.Vectors[i]
		t.Run(v.Name, func(t *testing.T) {
			clock := v.Now
			// Step 7's policy and the octets the host holds for the refs.
			checker, err := refs.NewChecker(refs.Policy{RequireAll: v.Options.RequireRefs, Keys: keys})
			if err != nil {
				t.Fatal(err)
			}
			material := &refs.Material{Octets: map[int][]byte{}}
			for i, s := range v.Options.RefOctets {
				n, err := strconv.Atoi(i)
				if err != nil {
					t.Fatal(err)
				}
				material.Octets[n] = []byte(s)
			}
			material.Salts = map[int][]byte{}
			for i, s := range v.Options.RefSalts {
				n, err := strconv.Atoi(i)
				if err != nil {
					t.Fatal(err)
				}
				if material.Salts[n], err = hex.DecodeString(s); err != nil {
					t.Fatal(err)
				}
			}
			ctx := refs.WithMaterial(context.Background(), material)
			opts := handoff.Options{
				Me:               v.Me,
				Keys:             keys,
				Skew:             time.Duration(m.Skew) * time.Second,
				MaxLifetime:      time.Duration(m.MaxLife) * time.Second,
				Limits:           handoff.Limits{MaxChain: v.Options.MaxChain},
				RequireFullChain: v.Options.RequireFullChain,
				Origins:          v.Options.Origins,
				CheckRefs:        checker.Check,
				Now:              func() time.Time { return time.Unix(clock, 0) },
				ChainCache:       cache,
			}
			if v.Options.MemorySince != 0 {
				opts.Since = time.Unix(v.Options.MemorySince, 0)
			}
			r, err := handoff.NewReceiver(opts)
			if err != nil {
				t.Fatal(err)
			}
			for j, s := range v.Before {
				clock = s.Now
				res, err := r.Receive(ctx, vecRead(t, s.File), s.Dialog)
				vecCheck(t, fmt.Sprintf("before[%d] %s", j, s.File), v, res, err, s.Expected)
			}
			clock = v.Now
			res, err := r.Receive(ctx, vecRead(t, v.File), v.Dialog)
			vecCheck(t, "", v, res, err, v.Expected)
		})
	}
}

// TestVectorFilesListed: every file under testdata/vectors is in the
// manifest, so none is left unchecked.
func TestVectorFilesListed(t *testing.T) {
	m, _ := vecLoad(t)
	listed := map[string]bool{"vectors.json": true, m.Trust: true, "README.md": true}
	for _, v := range m.Vectors {
		listed[v.File] = true
		for _, s := range v.Before {
			listed[s.File] = true
		}
	}
	for _, s := range m.Statuses {
		listed[s.File], listed[s.Offer] = true, true
	}
	err := filepath.WalkDir(vecDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(vecDir, path)
		rel = filepath.ToSlash(rel)
		if !listed[rel] && !strings.HasPrefix(rel, "keys/") {
			t.Errorf("%s is not listed in vectors.json", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestVectorHandoffSizeBound: SPEC 4 Bounds, a Handoff of at most 1 MiB,
// checked before it is parsed. Built here rather than committed: a valid
// Handoff padded with JSON white space to the bound and one octet past it.
func TestVectorHandoffSizeBound(t *testing.T) {
	m, keys := vecLoad(t)
	var base *vecCase
	for i := range m.Vectors {
		if m.Vectors[i].Name == "valid-jws-in-json" {
			base = &m.Vectors[i]
		}
	}
	if base == nil {
		t.Fatal("vector valid-jws-in-json missing")
	}
	b := vecRead(t, base.File)
	for _, tc := range []struct {
		size int
		want vecExpect
	}{
		{1 << 20, base.Expected},
		{1<<20 + 1, vecExpect{Result: "rejected", Reason: vecStr("policy"), Chain: "unchecked"}},
	} {
		in := append(slices.Clone(b), bytes.Repeat([]byte(" "), tc.size-len(b))...)
		r, err := handoff.NewReceiver(handoff.Options{Me: base.Me, Keys: keys, Now: func() time.Time { return time.Unix(base.Now, 0) }})
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Receive(context.Background(), in, "")
		v := *base
		v.Name, v.Rule = fmt.Sprintf("handoff-of-%d-octets", tc.size), "SPEC 4 Bounds: a Handoff of at most 1 MiB; exceeding it rejects with policy, offer null"
		vecCheck(t, "", &v, res, err, tc.want)
	}
}

func vecStr(s string) *string { return &s }

// TestStatusVectors runs the status vectors (D9) through VerifyStatus.
func TestStatusVectors(t *testing.T) {
	m, keys := vecLoad(t)
	for _, v := range m.Statuses {
		t.Run(v.Name, func(t *testing.T) {
			st := handoff.ParseElement(vecRead(t, v.File))
			offer := handoff.ParseElement(vecRead(t, v.Offer))
			vs, err := handoff.VerifyStatus(st, offer, handoff.StatusOptions{Keys: keys, Now: func() time.Time { return time.Unix(v.Now, 0) }})
			fail := func(format string, args ...any) {
				t.Helper()
				t.Errorf("%s (%s, offer %s)\n  rule: %s\n  %s\n  got: verified=%v err=%v", v.Name, v.File, v.Offer, v.Rule, fmt.Sprintf(format, args...), vs != nil, err)
			}
			switch v.Expected.Result {
			case "verified":
				if err != nil || vs == nil {
					fail("want verified")
					return
				}
				if string(vs.Status.State) != v.Expected.State {
					fail("want state %s, got %s", v.Expected.State, vs.Status.State)
				}
			case "rejected":
				if err == nil {
					fail("want rejected")
					return
				}
				if vs != nil {
					fail("a rejected status returned a VerifiedStatus")
				}
				var ce *handoff.CheckError
				if !errors.As(err, &ce) {
					fail("the error is not a *CheckError")
					return
				}
				if s := ce.Reason.Sentinel(); s == nil || !errors.Is(err, s) {
					fail("the CheckError's reason %q has no sentinel it matches", ce.Reason)
				}
				if v.Expected.Reason != nil {
					if ce.Reason != handoff.Reason(*v.Expected.Reason) || !errors.Is(err, handoff.Reason(*v.Expected.Reason).Sentinel()) {
						fail("want reason %s", *v.Expected.Reason)
					}
				}
			default:
				t.Fatalf("bad expected result %q", v.Expected.Result)
			}
		})
	}
}
