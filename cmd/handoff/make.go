package main

import (
	"crypto/ecdsa"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/trust"
)

func cmdKeygen(e env, args []string) error {
	fs := newFlags("keygen", e)
	out := fs.String("out", "", "write the key to `FILE` (mode 0600) instead of stdout")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	k, err := trust.GenerateKey()
	if err != nil {
		return err
	}
	b, err := trust.MarshalPrivateJWK(k)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if *out == "" {
		_, err = e.stdout.Write(b)
		return err
	}
	return writeKeyFile(*out, b)
}

// writeKeyFile writes a new private key to path: a file it creates itself
// (O_EXCL, so never an existing file, even an empty one, and never through
// a symlink, dangling or not), mode 0600 whatever the umask, written and
// synced before it reports success. An existing file may be another key,
// or one that others can read (a file made in a shared directory keeps its
// mode and owner); a key is never written into one.
func writeKeyFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		what := "exists"
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			what = "is a symbolic link"
		}
		return fmt.Errorf("%s %s; a key is written only to a new file", path, what)
	}
	if err != nil {
		return err
	}
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(b)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// The file is ours (O_EXCL): a half-written key is removed.
		os.Remove(path)
		return fmt.Errorf("%s: %w", path, err)
	}
	// The new name itself is durable only once its directory is synced.
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("%s: syncing its directory: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("%s: syncing its directory: %w", path, err)
	}
	return nil
}

func cmdPubkey(e env, args []string) error {
	fs := newFlags("pubkey", e)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one KEYFILE")
	}
	k, _, err := loadKey(e, pos[0])
	if err != nil {
		return err
	}
	b, err := trust.MarshalPublicJWK(&k.PublicKey)
	if err != nil {
		return err
	}
	_, err = e.stdout.Write(append(b, '\n'))
	return err
}

// loadKey reads the private key of --key (or pubkey's KEYFILE). A key file
// that group or others may read still works, but draws a warning on
// stderr, as ssh does: the key is as secret as the file's mode lets it be.
func loadKey(e env, path string) (*ecdsa.PrivateKey, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxKeyFile {
		return nil, "", fmt.Errorf("key file %s is larger than %d octets: not a JWK", path, maxKeyFile)
	}
	k, kid, err := trust.ParsePrivateJWK(b)
	if err != nil {
		return nil, "", withHint(fmt.Errorf("key file %s: %w", path, err), path, kindPrivateKey)
	}
	// As ssh does: any access for group or others (0o077). A key others
	// can write can be swapped for theirs. (Only for a private key: a
	// public one given by mistake gets its hint instead.)
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(e.stderr, "handoff: warning: private key %s is accessible by others (mode %#o); chmod 600 %s\n",
			safeText(path), fi.Mode().Perm(), safeText(path))
	}
	return k, kid, nil
}

// maxKeyFile bounds a key file: a P-256 JWK is about 250 octets.
const maxKeyFile = 64 << 10

// unixFlag is --now: a Unix time in seconds; unset means the clock.
type unixFlag struct {
	t   time.Time
	set bool
}

func (u *unixFlag) String() string { return "" }
func (u *unixFlag) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return errors.New("not a Unix time in seconds")
	}
	u.t, u.set = time.Unix(n, 0), true
	return nil
}

func (u *unixFlag) now() time.Time {
	if u.set {
		return u.t
	}
	return time.Now()
}

// readHandoff reads and decodes a Handoff file for offer --from and
// status --from.
func readHandoff(path string) (*handoff.Handoff, error) {
	b, err := readBounded(path, handoff.DefaultLimits().MaxHandoff)
	if err != nil {
		return nil, err
	}
	h, err := handoff.ParseHandoff(b, handoff.Limits{})
	if err != nil {
		return nil, withHintAs(fmt.Errorf("%s is not a valid Handoff: %w", path, err), path, kindHandoff, true) // every caller reads --from
	}
	return h, nil
}

// offerOf reads the payload of a Handoff's offer without checking its
// signature (the caller's own offer, or one it received).
func offerOf(h *handoff.Handoff, path string) (*handoff.Offer, error) {
	o, _, err := handoff.UnsafeDecode(h.Offer)
	if err != nil {
		return nil, fmt.Errorf("%s: the offer cannot be read: %v", path, err)
	}
	if o == nil {
		return nil, fmt.Errorf("%s: the Handoff carries a status where its offer should be", path)
	}
	return o, nil
}

func form(cose bool) handoff.Form {
	if cose {
		return handoff.FormCOSE
	}
	return handoff.FormJWS
}

func cmdOffer(e env, args []string) error {
	fs := newFlags("offer", e)
	keyFile := fs.String("key", "", "the delegator's private key `KEYFILE` (JWK)")
	iss := fs.String("iss", "", "the delegator's AgentId (with --from: default the received offer's aud)")
	aud := fs.String("aud", "", "the delegate's AgentId")
	dialog := fs.String("dialog", "", "the host protocol's dialog id (with --from: default the received offer's)")
	task := fs.String("task", "", "the host protocol's task id")
	ttl := fs.Int64("ttl", 300, "seconds until exp")
	var now unixFlag
	fs.Var(&now, "now", "issue time, Unix seconds (default: the clock)")
	obo := fs.String("obo", "", "the principal's sub")
	grantFile := fs.String("grant-file", "", "a credential whose digest becomes grant")
	// --ref-file and --add-ref fill one list, so the refs keep the order of
	// the flags on the command line, the two kinds interleaved.
	var refArgs []refArg
	fs.Var(refArgFlag{&refArgs, false}, "ref-file", "a file whose digest becomes a ref of kind digest (repeatable)")
	fs.Var(refArgFlag{&refArgs, true}, "add-ref", "a reference file that handoff ref wrote, added as a ref (repeatable)")
	fs.Var(renamedFlag("add-ref"), "ref", "")
	from := fs.String("from", "", "a received Handoff to pass on")
	cose := fs.Bool("cose", false, "sign as COSE_Sign1 instead of JWS")
	cbor := fs.Bool("cbor", false, "write the Handoff as CBOR")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	// With --from, the new offer continues the received one: it is sent
	// by that offer's aud, in its dialog, unless told otherwise. An --iss
	// that is not that aud breaks the chain at this link (every receiver
	// answers broken-chain): said on stderr, and still signed, as a test
	// of receivers may want. The received offer is not verified here, and
	// one that cannot be read is passed on as it is, with no defaults.
	var received *handoff.Handoff
	var ro *handoff.Offer // the received offer, when it can be read
	need := []string{"key", "iss", "aud", "dialog"}
	if *from != "" {
		if received, err = readHandoff(*from); err != nil {
			return err
		}
		if o, _, derr := handoff.UnsafeDecode(received.Offer); derr == nil && o != nil {
			ro = o
			need = []string{"key", "aud"} // iss and dialog follow from the received offer
			switch {
			case !flagSet(fs, "iss"):
				*iss = ro.Aud
			case *iss != ro.Aud:
				fmt.Fprintf(e.stderr, "handoff: warning: --iss %s is not the audience of the offer in %s (%s): only its audience "+
					"passes it on, and every receiver will reject this chain as broken-chain\n", safeText(*iss), safeText(*from), safeText(ro.Aud))
			}
			if !flagSet(fs, "dialog") {
				*dialog = ro.Dialog
			}
		}
	}
	if err := required(fs, need...); err != nil {
		return err
	}
	if *iss == "" || *dialog == "" {
		return usagef("--iss and --dialog must not be empty")
	}
	if *ttl <= 0 || *ttl > maxSeconds {
		return usagef("--ttl must be a number of seconds from 1 to %d", maxSeconds)
	}
	if *cbor && isTerminal(e.stdout) {
		return usagef("refusing to write CBOR to a terminal: redirect it to a file (or leave out --cbor for JSON)")
	}
	key, _, err := loadKey(e, *keyFile)
	if err != nil {
		return err
	}
	if *ttl > int64(defaultMaxLifetime/time.Second) {
		fmt.Fprintf(e.stderr, "handoff: warning: --ttl %d is longer than the %d s receivers accept by default "+
			"(draft \"Replay and Freshness\"): they reject this offer unless their --max-lifetime allows it\n",
			*ttl, int64(defaultMaxLifetime/time.Second))
	}
	t := now.now().Unix()
	// The chain check (draft "Chain Verification"): each offer was live
	// when the next was issued, and none was issued before the one it
	// continues. Said, and still signed, as for --iss above.
	if ro != nil {
		skew := int64(handoff.EffectiveSkew(0) / time.Second)
		switch {
		case t < ro.Iat:
			fmt.Fprintf(e.stderr, "handoff: warning: this offer's iat %d is before the iat %d of the offer in %s: "+
				"every receiver will reject this chain as broken-chain\n", t, ro.Iat, safeText(*from))
		case t-skew > ro.Exp:
			fmt.Fprintf(e.stderr, "handoff: warning: the offer in %s expired at %d, %d s before this offer's iat %d: "+
				"an offer passed on after it expired breaks the chain, and every receiver will reject it as broken-chain\n",
				safeText(*from), ro.Exp, t-ro.Exp, t)
		}
	}
	o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: *dialog, Task: *task, Iss: *iss, Aud: *aud, Iat: t, Exp: t + *ttl}
	if *obo != "" {
		o.Obo = &handoff.Principal{Sub: *obo}
	}
	if *grantFile != "" {
		b, err := os.ReadFile(*grantFile)
		if err != nil {
			return err
		}
		d := handoff.DigestOf(b)
		o.Grant = &d
	}
	for _, a := range refArgs {
		if a.refFile {
			r, err := readRefFile(a.path)
			if err != nil {
				return err
			}
			o.Refs = append(o.Refs, r)
			continue
		}
		b, err := os.ReadFile(a.path)
		if err != nil {
			return err
		}
		o.Refs = append(o.Refs, handoff.ContextRef{Kind: handoff.KindDigest, Dig: handoff.DigestOf(b)})
	}
	if received != nil {
		d := received.Offer.Digest()
		o.Prev = &d
	}
	s, err := handoff.NewSigner(key)
	if err != nil {
		return err
	}
	el, err := s.SignOffer(o, form(*cose))
	if err != nil {
		return err
	}
	h := &handoff.Handoff{Offer: el}
	if received != nil {
		h = received.PassOn(el)
	}
	return writeHandoff(e, h, *cbor)
}

// refArg is one --ref-file (a file to digest) or --add-ref (a ref file).
type refArg struct {
	path    string
	refFile bool
}

type refArgFlag struct {
	list    *[]refArg
	refFile bool
}

func (f refArgFlag) String() string { return "" }
func (f refArgFlag) Set(v string) error {
	*f.list = append(*f.list, refArg{v, f.refFile})
	return nil
}

func writeHandoff(e env, h *handoff.Handoff, cbor bool) error {
	enc := handoff.JSON
	if cbor {
		enc = handoff.CBOR
	}
	b, err := h.Encode(enc)
	if err != nil {
		return err
	}
	if !cbor {
		b = append(b, '\n')
	}
	_, err = e.stdout.Write(b)
	return err
}

func cmdStatus(e env, args []string) error {
	fs := newFlags("status", e)
	keyFile := fs.String("key", "", "the sender's private key `KEYFILE` (JWK)")
	from := fs.String("from", "", "the Handoff whose offer this status answers")
	state := fs.String("state", "", "accepted, rejected, completed, failed or canceled")
	reason := fs.String("reason", "", "the reason code, with rejected or failed: "+strings.Join(reasonCodes(), ", "))
	detail := fs.String("detail", "", "free text for people")
	iss := fs.String("iss", "", "the sender (default: the offer's aud; its iss for canceled)")
	var now unixFlag
	fs.Var(&now, "now", "issue time, Unix seconds (default: the clock)")
	cose := fs.Bool("cose", false, "sign as COSE_Sign1 instead of JWS")
	cbor := fs.Bool("cbor", false, "with --cose: write the raw COSE_Sign1 octets")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if err := required(fs, "key", "from", "state"); err != nil {
		return err
	}
	if *cbor && !*cose {
		return usagef("--cbor needs --cose: a JWS status is text")
	}
	if *cbor && isTerminal(e.stdout) {
		return usagef("refusing to write COSE octets to a terminal: redirect them to a file (or leave out --cbor for base64url text)")
	}
	st := handoff.State(*state)
	switch st {
	case handoff.StateAccepted, handoff.StateRejected, handoff.StateCompleted, handoff.StateFailed, handoff.StateCanceled:
	default:
		return usagef("--state %q is not one of accepted, rejected, completed, failed, canceled", *state)
	}
	// A reason that contradicts the state, or that no receiver knows: the
	// draft registers the codes, and a rejection says why.
	switch r := handoff.Reason(*reason); {
	case st == handoff.StateRejected && r == "":
		fmt.Fprintln(e.stderr, "handoff: warning: a rejected status without --reason: the delegator cannot tell why (the draft's codes: "+strings.Join(reasonCodes(), ", ")+")")
	case r != "" && st != handoff.StateRejected && st != handoff.StateFailed:
		fmt.Fprintf(e.stderr, "handoff: warning: --reason %s with --state %s: a reason explains a rejected or failed status\n", safeText(*reason), st)
	case r != "" && !slices.Contains(reasonCodes(), *reason):
		fmt.Fprintf(e.stderr, "handoff: warning: --reason %s is not one of the draft's codes (%s): receivers may not know it\n", safeText(*reason), strings.Join(reasonCodes(), ", "))
	}
	key, _, err := loadKey(e, *keyFile)
	if err != nil {
		return err
	}
	h, err := readHandoff(*from)
	if err != nil {
		return err
	}
	offer, err := offerOf(h, *from)
	if err != nil {
		return err
	}
	sender, receiver := offer.Aud, offer.Iss
	if st == handoff.StateCanceled {
		sender, receiver = offer.Iss, offer.Aud
	}
	switch {
	case st == handoff.StateRejected && handoff.Reason(*reason) == handoff.ReasonWrongAudience:
		// D9's one third party: the agent the offer reached by mistake
		// tells offer.iss so. Who that is the offer cannot say, hence
		// --iss is required; aud is always offer.iss.
		if *iss == "" {
			return usagef("--iss is required with --state rejected --reason wrong-audience: it names the agent the offer reached")
		}
		if *iss == offer.Iss {
			return usagef("--iss %q is the offer's iss: a wrong-audience rejection goes to it, from the agent the offer reached", *iss)
		}
		sender, receiver = *iss, offer.Iss
	case *iss != "":
		switch *iss {
		case sender:
		case receiver:
			sender, receiver = receiver, sender
		default:
			return usagef("--iss %q names neither party of the offer (%q, %q)", *iss, offer.Iss, offer.Aud)
		}
	}
	if err := keyOfParty(e, key, h.Offer, offer, st, sender); err != nil {
		return err
	}
	s := &handoff.Status{Offer: h.Offer.Digest(), Iss: sender, Aud: receiver, Iat: now.now().Unix(),
		State: st, Reason: handoff.Reason(*reason), Detail: *detail}
	signer, err := handoff.NewSigner(key)
	if err != nil {
		return err
	}
	el, err := signer.SignStatus(s, form(*cose))
	if err != nil {
		return err
	}
	if *cbor {
		_, err = e.stdout.Write(el.Octets)
		return err
	}
	_, err = fmt.Fprintln(e.stdout, el.Text())
	return err
}

// anyKid binds one key to iss whatever kid a message names: whether that
// key signed the offer, under the kid its signer chose.
type anyKid struct {
	iss string
	k   trust.Key
}

func (a anyKid) Keys(iss, _ string) []trust.Key {
	if iss != a.iss {
		return nil
	}
	return []trust.Key{a.k}
}

// defaultMaxLifetime is the longest exp - iat receivers accept by default
// (handoff.Options.MaxLifetime left zero; verify's --max-lifetime).
const defaultMaxLifetime = 300 * time.Second

// flagSet reports whether the flag name was given.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// keyOfParty checks, where the command can know it, that key belongs to
// the party that signs a status in state st: the offer tells whose key
// signed it (the delegator's). A status only the delegate sends, signed
// with the key that signed the offer, is refused (every receiver would
// find it signed by the wrong party); a "canceled" signed with another key
// than the offer's draws a warning (the delegator may hold several keys).
func keyOfParty(e env, key *ecdsa.PrivateKey, offerEl handoff.Element, o *handoff.Offer, st handoff.State, sender string) error {
	k, err := trust.NewKey(&key.PublicKey)
	if err != nil {
		return err
	}
	_, verr := handoff.VerifyElement(offerEl, anyKid{o.Iss, k})
	signedOffer := verr == nil
	switch {
	case st == handoff.StateCanceled && !signedOffer:
		fmt.Fprintf(e.stderr, "handoff: warning: --key (kid %s) is not the key that signed the offer: a canceled status "+
			"comes from the offer's iss %s, and receivers check it with the keys their trust file binds to it\n", k.Kid, safeText(o.Iss))
	case st != handoff.StateCanceled && signedOffer && o.Iss != o.Aud && sender != o.Iss:
		return usagef("--key (kid %s) signed the offer: it is the delegator's key (%s), but a status in state %q is signed by %s",
			k.Kid, o.Iss, st, sender)
	}
	return nil
}

// reasonCodes are the draft's reason codes.
func reasonCodes() []string {
	return []string{string(handoff.ReasonBadSignature), string(handoff.ReasonUntrustedKey), string(handoff.ReasonWrongAudience),
		string(handoff.ReasonStale), string(handoff.ReasonReplay), string(handoff.ReasonEquivocation), string(handoff.ReasonBrokenChain),
		string(handoff.ReasonCycle), string(handoff.ReasonTooDeep), string(handoff.ReasonUnverifiableRef), string(handoff.ReasonRefMismatch),
		string(handoff.ReasonPolicy)}
}
