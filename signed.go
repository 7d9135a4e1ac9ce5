package handoff

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/quantumlearningmachines/handoff/internal/cose"
	"github.com/quantumlearningmachines/handoff/internal/jws"
	"github.com/quantumlearningmachines/handoff/trust"
)

// Form is the signed form of an element (draft "Signing").
type Form int

const (
	// FormJWS is a JWS Compact Serialization with a JSON payload.
	FormJWS Form = iota
	// FormCOSE is a tagged COSE_Sign1 with a CBOR payload.
	FormCOSE
	// FormInvalid marks carried text that is neither a JWS nor base64url;
	// it never verifies.
	FormInvalid
)

func (f Form) String() string {
	switch f {
	case FormJWS:
		return "JWS"
	case FormCOSE:
		return "COSE"
	}
	return "invalid"
}

// Element is a signed handoff: an offer or a status in signed form, kept as
// the exact octets received (draft "Handoff Digest"): the ASCII of a JWS, or
// the encoded tagged COSE_Sign1. Forward Octets unchanged; never re-encode.
type Element struct {
	Form   Form
	Octets []byte
}

// Digest is the handoff digest: SHA-256 over the octets exactly as sent.
func (e Element) Digest() Digest { return DigestOf(e.Octets) }

// Text is the element as JSON carries it: the JWS itself, or the COSE_Sign1
// in base64url.
func (e Element) Text() string {
	if e.Form == FormCOSE {
		return b64.EncodeToString(e.Octets)
	}
	return string(e.Octets)
}

// ParseElement reads a signed element as carried on its own (a status, say):
// compact JWS text, base64url COSE text, or raw tagged COSE_Sign1 octets,
// told apart by content. Leading and trailing ASCII white space around text
// is ignored. It checks nothing else; see VerifyStatus and Receiver.
func ParseElement(b []byte) Element {
	if len(b) > 0 && b[0] == 0xd2 { // tag 18: raw COSE_Sign1
		return Element{Form: FormCOSE, Octets: b}
	}
	return elementFromText(string(trimSpace(b)))
}

// ParseElementText reads a signed element carried as text (a JSON string,
// A2A metadata, MCP _meta): compact JWS, or base64url COSE_Sign1; never
// raw COSE octets, which text cannot hold (ParseElement takes a first
// octet 0xd2 for one, and a string may begin with that octet: "ҿ").
// Leading and trailing ASCII white space is ignored.
func ParseElementText(s string) Element {
	return elementFromText(string(trimSpace([]byte(s))))
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isJSONSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isJSONSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// elementFromText classifies carried text (draft "Signing"): text with a
// period is a JWS; text without one is a base64url COSE_Sign1.
func elementFromText(s string) Element {
	if strings.IndexByte(s, '.') >= 0 {
		return Element{Form: FormJWS, Octets: []byte(s)}
	}
	if b, err := decodeB64u(s); err == nil {
		return Element{Form: FormCOSE, Octets: b}
	}
	return Element{Form: FormInvalid, Octets: []byte(s)}
}

// parsed is a signed element whose structure and payload have been checked
// (D1 (a)) but whose signature has not. It is a value (parseElement is on
// every receive path, once per chain element), and holds the parsed form
// rather than a method value, so that neither needs an allocation.
type parsed struct {
	kid    string
	hasKid bool
	alg    string
	offer  *Offer
	status *Status
	tok    *jws.Token    // FormJWS
	msg    *cose.Message // FormCOSE
}

// digest is the handoff digest of e, the element p was parsed from. For a
// JWS it is computed in the same pass as the signing input's hash, which
// verify then reuses.
func (p *parsed) digest(e Element) Digest {
	if p.tok != nil {
		d := p.tok.Digest()
		return Digest{Alg: AlgSHA256, Val: d[:]}
	}
	return e.Digest()
}

// form is the signed form p was parsed in.
func (p *parsed) form() Form {
	if p.tok != nil {
		return FormJWS
	}
	return FormCOSE
}

// verify checks the signature with pub.
func (p *parsed) verify(pub *ecdsa.PublicKey) error {
	if p.tok != nil {
		return p.tok.Verify(pub)
	}
	return p.msg.Verify(pub)
}

// parseElement runs D1 (a): the signed form, then the payload against the
// data model, then v and type. Errors are *memberError (bad-signature, or
// policy for an exceeded bound).
func parseElement(e Element, typ string, lim Limits) (parsed, error) {
	if len(e.Octets) > lim.MaxElement {
		return parsed{}, overBound("", "signed element of %d octets exceeds the limit of %d", len(e.Octets), lim.MaxElement)
	}
	p := parsed{alg: trust.ES256}
	var payload []byte
	var enc Encoding
	switch e.Form {
	case FormJWS:
		t, err := jws.Parse(e.Octets)
		if err != nil {
			return parsed{}, malformed("", "%v", err)
		}
		p.kid, p.hasKid, payload, enc = t.Header.Kid, true, t.Payload, JSON
		p.tok = t
	case FormCOSE:
		m, err := cose.Parse(e.Octets)
		if err != nil {
			return parsed{}, malformed("", "%v", err)
		}
		p.kid, p.hasKid, payload, enc = m.Kid, m.HasKid, m.Payload, CBOR
		p.msg = m
	default:
		return parsed{}, malformed("", "text is neither a compact JWS nor base64url")
	}
	// jws.Parse and cose.Parse both put the payload in a buffer of their
	// own that nothing writes again: the decoded texts may alias it.
	var err error
	if typ == "offer" {
		p.offer, err = decodeOfferPayload(payload, enc, lim, "payload: ", true)
	} else {
		p.status, err = decodeStatusPayload(payload, enc, lim, "payload: ", true)
	}
	if err != nil {
		return parsed{}, err
	}
	return p, nil
}

// KeySource is the trust configuration as the checks see it: the keys bound
// to an AgentId, narrowed by kid when one is given (D10). *trust.Config is
// one.
type KeySource interface {
	Keys(iss, kid string) []trust.Key
}

var errNoKey = errors.New("no trusted key")

// verifyWith runs D1 (b) and (c): find the keys bound to iss (and kid), then
// verify. It returns the key that verified, errNoKey wrapped when no key is
// bound, or a signature error.
func (p *parsed) verifyWith(keys KeySource, iss string) (*trust.Key, error) {
	kid := ""
	if p.hasKid {
		if p.kid == "" {
			// A kid that is given but empty names no key (D10); it must
			// not widen to every key bound to iss.
			return nil, fmt.Errorf("%w for %q: the message's kid is empty", errNoKey, iss)
		}
		kid = p.kid
	}
	ks := keys.Keys(iss, kid)
	if len(ks) == 0 {
		if kid != "" {
			return nil, fmt.Errorf("%w for %q with kid %q", errNoKey, iss, kid)
		}
		return nil, fmt.Errorf("%w for %q", errNoKey, iss)
	}
	var last error
	for i := range ks {
		k := &ks[i]
		if k.Alg != p.alg { // D2: the key's one algorithm decides
			last = fmt.Errorf("key %q is for %s, message uses %s", k.Kid, k.Alg, p.alg)
			continue
		}
		if err := p.verify(k.Public); err != nil {
			last = err
			continue
		}
		// A copy: ks may be the KeySource's own storage (trust.Config's
		// is), which a caller writing into a Result's Key must not reach.
		kc := *k
		return &kc, nil
	}
	return nil, last
}

// Signer signs offers and statuses with one P-256 key. Its kid is the key's
// JWK thumbprint.
type Signer struct {
	key  *ecdsa.PrivateKey
	kid  string
	rand io.Reader
}

// NewSigner returns a Signer for a P-256 private key.
func NewSigner(key *ecdsa.PrivateKey) (*Signer, error) {
	if key == nil || key.Curve != elliptic.P256() {
		return nil, errors.New("handoff: signing key must be P-256 (ES256)")
	}
	return &Signer{key: key, kid: trust.Thumbprint(&key.PublicKey), rand: rand.Reader}, nil
}

// Kid returns the key id written into signed elements.
func (s *Signer) Kid() string { return s.kid }

// Public returns the public key.
func (s *Signer) Public() *ecdsa.PublicKey { return &s.key.PublicKey }

func formEncoding(f Form) Encoding {
	if f == FormCOSE {
		return CBOR
	}
	return JSON
}

// sign signs an encoded payload in form f.
func (s *Signer) sign(payload []byte, f Form) (Element, error) {
	var out []byte
	var err error
	switch f {
	case FormJWS:
		out, err = jws.Sign(s.rand, s.key, s.kid, payload)
	case FormCOSE:
		out, err = cose.Sign(s.rand, s.key, s.kid, payload)
	default:
		return Element{}, fmt.Errorf("handoff: cannot sign in form %v", f)
	}
	if err != nil {
		return Element{}, err
	}
	return Element{Form: f, Octets: out}, nil
}

// SignOffer signs an offer payload. The offer must fit the data model: a
// hop of at least 16 octets (see NewHop), exp after iat, and so on. Sign a
// hop once: a retransmission resends the octets already signed (draft
// "Forks, Concurrency, and Equivocation").
func (s *Signer) SignOffer(o *Offer, f Form) (Element, error) {
	if o.Exp <= o.Iat {
		return Element{}, errors.New("handoff: offer exp must be later than iat")
	}
	// What every receiver would refuse, refused before signing: no one can
	// answer an offer without its parties or its hop.
	if err := needed("offer", "iss", o.Iss, "aud", o.Aud, "hop", o.Hop); err != nil {
		return Element{}, err
	}
	if err := offerSecrets(o); err != nil {
		return Element{}, err
	}
	payload, err := o.Encode(formEncoding(f))
	if err != nil {
		return Element{}, err
	}
	return s.sign(payload, f)
}

// SignStatus signs a status payload.
func (s *Signer) SignStatus(st *Status, f Form) (Element, error) {
	// D9: a receiver checks iss and aud against the offer's parties, and
	// the digest against the offer: a status without them verifies for no
	// one.
	if err := needed("status", "iss", st.Iss, "aud", st.Aud, "state", string(st.State), "offer digest", st.Offer.Alg); err != nil {
		return Element{}, err
	}
	if len(st.Offer.Val) == 0 {
		return Element{}, errors.New("handoff: a status needs its offer digest's value")
	}
	if err := statusSecrets(st); err != nil {
		return Element{}, err
	}
	payload, err := st.Encode(formEncoding(f))
	if err != nil {
		return Element{}, err
	}
	return s.sign(payload, f)
}

// NewHop returns a fresh hop identifier: 16 octets (128 bits) from
// crypto/rand, base64url without padding.
func NewHop() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return b64.EncodeToString(b[:])
}

// needed refuses, naming them all, the members (name, value pairs) that
// are empty.
func needed(what string, pairs ...string) error {
	var empty []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			empty = append(empty, pairs[i])
		}
	}
	if len(empty) == 0 {
		return nil
	}
	return fmt.Errorf("handoff: a%s %s needs %s", map[bool]string{true: "n", false: ""}[what == "offer"], what, strings.Join(empty, ", "))
}
