package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/internal/wire"
	"github.com/quantumlearningmachines/handoff/refs"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/trust"
)

// errTooLarge marks a file not read because it exceeds a bound.
var errTooLarge = errors.New("exceeds the size bound")

// readBounded reads at most max octets of a file; a larger file is
// errTooLarge and is not read further.
func readBounded(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > max {
		return nil, fmt.Errorf("%s: %w of %d octets", path, errTooLarge, max)
	}
	return b, nil
}

// secondsFlag is a duration given in whole seconds.
type secondsFlag struct{ d *time.Duration }

func (s secondsFlag) String() string { return "" }
func (s secondsFlag) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > maxSeconds {
		return fmt.Errorf("not a number of seconds from 1 to %d", maxSeconds)
	}
	*s.d = time.Duration(n) * time.Second
	return nil
}

// skewFlag is --skew: whole seconds, 0 included (no skew at all, which the
// library spells handoff.NoSkew since its zero means the default).
type skewFlag struct{ d *time.Duration }

func (s skewFlag) String() string { return "" }
func (s skewFlag) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > maxSeconds {
		return fmt.Errorf("not a number of seconds from 0 to %d", maxSeconds)
	}
	*s.d = time.Duration(n) * time.Second
	if n == 0 {
		*s.d = handoff.NoSkew
	}
	return nil
}

// maxSeconds bounds the seconds flags so that they fit a time.Duration
// with room for the additions the checks make (about 100 years).
const maxSeconds = 100 * 366 * 24 * 3600

func loadTrust(path string) (*trust.Config, error) {
	c, err := trust.Load(path)
	if err != nil {
		return nil, withHint(fmt.Errorf("trust file %s: %w", path, err), path, kindTrustFile)
	}
	return c, nil
}

func writeLine(e env, m *wire.Map) error {
	b, err := wire.EncodeJSON(m)
	if err != nil {
		return err
	}
	_, err = e.stdout.Write(append(safeJSON(b), '\n'))
	return err
}

func cmdVerify(e env, args []string) error {
	fs := newFlags("verify", e)
	trustFile := fs.String("trust", "", "the trust file")
	me := fs.String("me", "", "this receiver's AgentId")
	var now unixFlag
	fs.Var(&now, "now", "the current time, Unix seconds (default: the clock)")
	var skew, maxLife time.Duration
	fs.Var(skewFlag{&skew}, "skew", "clock skew allowed, seconds (default 60; 0 for none)")
	fs.Var(secondsFlag{&maxLife}, "max-lifetime", "maximum exp - iat, seconds (default 300)")
	maxChain := fs.Int("max-chain", handoff.DefaultLimits().MaxChain, "maximum chain length")
	dialog := fs.String("dialog", "", "the host message's dialog id; without it step 5 (the offer's dialog is the host's) is not checked")
	full := fs.Bool("require-full-chain", false, "reject an offer with a prev whose chain is not full")
	var origins stringList
	fs.Var(&origins, "origin", "with --require-full-chain: an `AgentId` trusted to start a chain (repeatable); the chain's first offer must be one's")
	stateDir := fs.String("state", "", "keep the replay memory in `DIR` across runs (default: in memory, for this run only)")
	requireRefs := fs.Bool("require-refs", false, "every ref of the outer offer must verify")
	refOctets := &indexedFlag{}
	fs.Var(refOctets, "ref-octets", "`INDEX=FILE`: the octets of the outer offer's ref INDEX (0-based; repeatable)")
	refSalts := &indexedFlag{parse: func(v string) error { _, err := refs.ParseSalt(v); return err }}
	fs.Var(refSalts, "ref-salt", "`INDEX=B64U`: the salt of the outer offer's salted-digest ref INDEX (repeatable)")
	var services stringList
	fs.Var(&services, "scitt-service", "an AgentId in the trust file whose keys sign SCITT receipts (repeatable)")
	files, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := required(fs, "trust", "me"); err != nil {
		return err
	}
	if len(files) == 0 {
		return usagef("no Handoff FILE given")
	}
	if *maxChain < 1 {
		return usagef("--max-chain must be at least 1")
	}
	if len(origins) > 0 && !*full {
		return usagef("--origin needs --require-full-chain: an origin is known only from a full chain")
	}
	keys, err := loadTrust(*trustFile)
	if err != nil {
		return err
	}
	// Read every file before judging any: an unreadable one exits 2 with
	// no verdict lines. A file over the Handoff bound is not read; it gets
	// a "policy" line.
	lim := handoff.DefaultLimits()
	lim.MaxChain = *maxChain
	inputs := make([][]byte, len(files))
	tooLarge := make([]bool, len(files))
	for i, f := range files {
		b, err := readBounded(f, lim.MaxHandoff)
		if errors.Is(err, errTooLarge) {
			tooLarge[i] = true
			continue
		}
		if err != nil {
			return err
		}
		inputs[i] = b
	}
	// The octets and salts are the same for every FILE: each one's outer
	// offer has its refs checked against them (step 7). An INDEX past
	// the refs of a FILE's offer is named on stderr for that FILE (see
	// unusedIndexes): the FILE, not the flag, may be what is wrong, so it
	// is not a usage error.
	m, err := material(refOctets, refSalts)
	if err != nil {
		return err
	}
	checker, err := refs.NewChecker(refs.Policy{RequireAll: *requireRefs, Keys: keys, Services: services})
	if err != nil {
		return err
	}
	ctx := refs.WithMaterial(context.Background(), m)
	opts := handoff.Options{Me: *me, Keys: keys, Skew: skew, MaxLifetime: maxLife, Limits: lim,
		RequireFullChain: *full, Origins: origins, Now: now.now, CheckRefs: checker.Check}
	if *stateDir != "" {
		st, err := openState(*stateDir)
		if err != nil {
			return err
		}
		defer st.Close()
		// Records past their keep time go before this run's checks, but
		// never by a --now ahead of the clock: a later run at the real
		// time would then take a replay of a swept offer for a new one.
		sweepAt := now.now()
		if real := time.Now(); sweepAt.After(real) {
			sweepAt = real
		}
		if _, err := st.Sweep(context.Background(), sweepAt, 0); err != nil {
			return err
		}
		opts.Memory = store.Replay(st, now.now)
	}
	r, err := handoff.NewReceiver(opts)
	if err != nil {
		return err
	}
	allAccepted := true
	for i, f := range files {
		line := &wire.Map{}
		line.Add("file", fileName(f))
		if tooLarge[i] {
			allAccepted = false
			line.Add("result", string(handoff.Rejected))
			line.Add("reason", string(handoff.ReasonPolicy))
			line.Add("offer", nil)
			line.Add("chain", string(handoff.ChainUnchecked))
			if err := writeLine(e, line); err != nil {
				return err
			}
			continue
		}
		res, err := r.Receive(ctx, inputs[i], *dialog)
		if res == nil {
			return err
		}
		if res.Outcome != handoff.Accepted {
			allAccepted = false
		}
		line.Add("result", string(res.Outcome))
		if res.Outcome == handoff.Rejected {
			line.Add("reason", string(res.Reason))
		}
		if res.OfferDigest != nil {
			line.Add("offer", res.OfferDigest.String())
		} else {
			line.Add("offer", nil)
		}
		line.Add("chain", string(res.ChainQuality))
		// Every offer that reached step 7 reports one outcome per ref
		// (issue 5, literally: "refs": [] for an offer without refs); an
		// offer stopped earlier has no "refs" member.
		if res.Refs != nil {
			outs := make([]any, len(res.Refs))
			for j, o := range res.Refs {
				outs[j] = string(o)
			}
			line.Add("refs", outs)
		}
		if err := writeLine(e, line); err != nil {
			return err
		}
		unusedIndexes(e, f, res, refOctets, refSalts)
		switch {
		case res.Err != nil:
			fmt.Fprintf(e.stderr, "handoff: %s: %s\n", safeText(f), safeText(res.Err.Error()))
			if res.Offer == nil {
				hintFile(e, f, inputs[i], kindHandoff) // not a Handoff at all, perhaps
			}
		case res.Outcome == handoff.Retransmission:
			// Not accepted, and no check failed: say why it is not new.
			if *stateDir != "" {
				fmt.Fprintf(e.stderr, "handoff: %s: a retransmission: the state in --state already remembers this offer's (iss, hop) with the same signed content (D5)\n", safeText(f))
			} else {
				fmt.Fprintf(e.stderr, "handoff: %s: a retransmission: an earlier FILE of this run has this offer's (iss, hop) with the same signed content (D5)\n", safeText(f))
			}
		case res.Outcome == handoff.Accepted:
			doubts(e, f, res)
		}
	}
	if !allAccepted {
		return errNegative
	}
	return nil
}

func cmdVerifyStatus(e env, args []string) error {
	fs := newFlags("verify-status", e)
	trustFile := fs.String("trust", "", "the trust file")
	from := fs.String("from", "", "the Handoff whose offer the statuses answer")
	var now unixFlag
	fs.Var(&now, "now", "the current time, Unix seconds (default: the clock)")
	files, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := required(fs, "trust", "from"); err != nil {
		return err
	}
	if len(files) == 0 {
		return usagef("no STATUS file given")
	}
	keys, err := loadTrust(*trustFile)
	if err != nil {
		return err
	}
	h, err := readHandoff(*from)
	if err != nil {
		return err
	}
	if _, err := offerOf(h, *from); err != nil {
		return err
	}
	inputs := make([][]byte, len(files))
	for i, f := range files {
		if inputs[i], err = readBounded(f, handoff.DefaultLimits().MaxElement*2); err != nil {
			return err
		}
	}
	all := true
	for i, f := range files {
		line := &wire.Map{}
		line.Add("file", fileName(f))
		el := handoff.ParseElement(inputs[i])
		vs, err := handoff.VerifyStatus(el, h.Offer, handoff.StatusOptions{Keys: keys, Now: now.now})
		var s *handoff.Status
		if vs != nil {
			s = vs.Status
			line.Add("result", "verified")
		} else {
			all = false
			line.Add("result", "rejected")
			_, s, _ = handoff.UnsafeDecode(el)
		}
		if s != nil {
			line.Add("state", string(s.State))
			if s.Reason != "" {
				line.Add("reason", string(s.Reason))
			}
		}
		if err != nil {
			line.Add("error", err.Error())
		}
		if err := writeLine(e, line); err != nil {
			return err
		}
		if vs == nil {
			hintFile(e, f, inputs[i], kindStatus)
		}
	}
	if !all {
		return errNegative
	}
	return nil
}

// doubts names on stderr what an accepted offer leaves unproven, so that
// exit 0 is never read as more than it says: chain elements no trusted key
// verified (a partial or unverifiable chain: which index, which iss), and
// references that did not verify.
func doubts(e env, f string, res *handoff.Result) {
	for i, c := range res.Chain {
		if c.Key == nil && c.Offer != nil {
			fmt.Fprintf(e.stderr, "handoff: %s: note: chain[%d] (from %s) is not verified: the trust file binds no key to its iss, or none with its kid; the chain is %s\n",
				safeText(f), i, safeText(c.Offer.Iss), res.ChainQuality)
		}
	}
	for i, o := range res.Refs {
		if o == handoff.RefVerified {
			continue
		}
		what := map[handoff.RefOutcome]string{
			handoff.RefMismatch:     "the octets given do not match its digest",
			handoff.RefUnverifiable: "it could not be checked (no octets, salt or proof it can use)",
			handoff.RefNotChecked:   "it was not checked (give --ref-octets, and --ref-salt for a salted one; --require-refs makes it required)",
		}[o]
		if what == "" {
			what = string(o)
		}
		fmt.Fprintf(e.stderr, "handoff: %s: note: ref %d is %s: %s\n", safeText(f), i, o, what)
	}
}

// unusedIndexes names on stderr each --ref-octets or --ref-salt INDEX that
// no ref of f's offer has (the offer reached step 7 with fewer refs), which
// would otherwise go unused without a word.
func unusedIndexes(e env, f string, res *handoff.Result, flags ...*indexedFlag) {
	if res.Refs == nil {
		return
	}
	for j, fl := range flags {
		idx := make([]int, 0, len(fl.vals))
		for i := range fl.vals {
			if i >= len(res.Refs) {
				idx = append(idx, i)
			}
		}
		slices.Sort(idx)
		for _, i := range idx {
			fmt.Fprintf(e.stderr, "handoff: %s: note: %s %d names no ref of this offer (it has %d): not used\n",
				safeText(f), []string{"--ref-octets", "--ref-salt"}[j], i, len(res.Refs))
		}
	}
}
