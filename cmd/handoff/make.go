package main

import (
	"crypto/ecdsa"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
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
		return fmt.Errorf("not a Unix time in seconds: %q", v)
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
		return nil, withHint(fmt.Errorf("%s is not a valid Handoff: %w", path, err), path, kindHandoff)
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
	iss := fs.String("iss", "", "the delegator's AgentId")
	aud := fs.String("aud", "", "the delegate's AgentId")
	dialog := fs.String("dialog", "", "the host protocol's dialog id")
	task := fs.String("task", "", "the host protocol's task id")
	ttl := fs.Int64("ttl", 300, "seconds until exp")
	var now unixFlag
	fs.Var(&now, "now", "issue time, Unix seconds (default: the clock)")
	obo := fs.String("obo", "", "the principal's sub")
	grantFile := fs.String("grant-file", "", "a credential whose digest becomes grant")
	// --ref-file and --ref fill one list, so the refs keep the order of
	// the flags on the command line, the two kinds interleaved.
	var refArgs []refArg
	fs.Var(refArgFlag{&refArgs, false}, "ref-file", "a file whose digest becomes a ref of kind digest (repeatable)")
	fs.Var(refArgFlag{&refArgs, true}, "ref", "a reference file that handoff ref wrote, added as a ref (repeatable)")
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
	if err := required(fs, "key", "iss", "aud", "dialog"); err != nil {
		return err
	}
	if *ttl <= 0 || *ttl > maxSeconds {
		return usagef("--ttl must be a number of seconds from 1 to %d", maxSeconds)
	}
	key, _, err := loadKey(e, *keyFile)
	if err != nil {
		return err
	}
	t := now.now().Unix()
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
	var received *handoff.Handoff
	if *from != "" {
		if received, err = readHandoff(*from); err != nil {
			return err
		}
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

// refArg is one --ref-file (a file to digest) or --ref (a ref file).
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
	reason := fs.String("reason", "", "the reason code")
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
	st := handoff.State(*state)
	switch st {
	case handoff.StateAccepted, handoff.StateRejected, handoff.StateCompleted, handoff.StateFailed, handoff.StateCanceled:
	default:
		return usagef("--state %q is not one of accepted, rejected, completed, failed, canceled", *state)
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
