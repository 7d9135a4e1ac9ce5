package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"math/big"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
	gocose "github.com/veraison/go-cose"
)

// The signed forms, written by hand over crypto/ecdsa so that a vector can
// sign any header and payload octets, however malformed (the library's own
// Signer refuses to): a mutation then tests the verifier, not just the
// signature.

const (
	jwsTyp      = "agent-handoff+jwt"
	coseCT      = "application/agent-handoff+cbor"
	coseTag     = 18
	coseAlgES   = -7
	coseLblAlg  = 1
	coseLblCrit = 2
	coseLblCT   = 3
	coseLblKid  = 4
)

type agent struct {
	name string // key file name, without .jwk
	id   string // AgentId
	key  *ecdsa.PrivateKey
	kid  string // RFC 7638 thumbprint
}

// rs is an ES256 signature over input: R||S, 32 octets each.
func rs(key *ecdsa.PrivateKey, input []byte) []byte {
	h := sha256.Sum256(input)
	r, s, err := ecdsa.Sign(rand.Reader, key, h[:])
	if err != nil {
		panic(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return sig
}

// der is an ES256 signature over input in ASN.1 DER (the wrong form for
// JWS and COSE).
func der(key *ecdsa.PrivateKey, input []byte) []byte {
	h := sha256.Sum256(input)
	sig, err := ecdsa.SignASN1(rand.Reader, key, h[:])
	if err != nil {
		panic(err)
	}
	return sig
}

func hs256(secret, input []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(input)
	return m.Sum(nil)
}

func jwsHeader(kid string) string {
	return `{"alg":"ES256","kid":` + jsonString(kid) + `,"typ":"agent-handoff+jwt"}`
}

// jwsParts signs the signing input hPart.pPart (already encoded, as given)
// and returns the compact JWS.
func jwsParts(key *ecdsa.PrivateKey, hPart, pPart string) string {
	in := hPart + "." + pPart
	return in + "." + b64.EncodeToString(rs(key, []byte(in)))
}

// jwsRaw signs payload under a given header JSON text.
func jwsRaw(key *ecdsa.PrivateKey, header string, payload []byte) elem {
	return elem{octets: []byte(jwsParts(key, b64.EncodeToString([]byte(header)), b64.EncodeToString(payload)))}
}

// jws signs payload under the standard header with a's kid.
func (a *agent) jws(payload []byte) elem { return jwsRaw(a.key, jwsHeader(a.kid), payload) }

// coseProt is the standard protected header {1: -7, 3: ct, 4: kid}.
func coseProt(kid string) cmap {
	return cmap{
		{cUint(coseLblAlg), cInt(coseAlgES)},
		{cUint(coseLblCT), cText(coseCT)},
		{cUint(coseLblKid), cBytes([]byte(kid))},
	}
}

func coseProtNoKid() cmap {
	return cmap{
		{cUint(coseLblAlg), cInt(coseAlgES)},
		{cUint(coseLblCT), cText(coseCT)},
	}
}

// sigStructure is the COSE Sig_structure of a Sign1 with empty external aad.
func sigStructure(prot, payload []byte) []byte {
	return cArray(cText("Signature1"), cBytes(prot), cBytes(nil), cBytes(payload))
}

// coseMsg assembles a tagged COSE_Sign1 from encoded parts.
func coseMsg(prot []byte, unprot []byte, payload []byte, sig []byte) []byte {
	return cTag(coseTag, cArray(cBytes(prot), unprot, cBytes(payload), cBytes(sig)))
}

// coseRaw signs payload under the given protected header octets.
func coseRaw(key *ecdsa.PrivateKey, prot []byte, unprot []byte, payload []byte) elem {
	if unprot == nil {
		unprot = cMap()
	}
	return elem{cose: true, octets: coseMsg(prot, unprot, payload, rs(key, sigStructure(prot, payload)))}
}

func (a *agent) cose(payload []byte) elem {
	return coseRaw(a.key, toCBOR(coseProt(a.kid)), nil, payload)
}

func (a *agent) coseNoKid(payload []byte) elem {
	return coseRaw(a.key, toCBOR(coseProtNoKid()), nil, payload)
}

// form names how an element is signed.
type form string

const (
	fJWS       form = "jws"
	fCOSE      form = "cose"
	fCOSENoKid form = "cose-nokid"
)

// sign signs an offer/status tree in form f: JSON payload for a JWS, CBOR
// for COSE.
func (a *agent) sign(f form, payload *obj) elem {
	switch f {
	case fJWS:
		return a.jws(toJSON(payload))
	case fCOSE:
		return a.cose(toCBOR(payload))
	case fCOSENoKid:
		return a.coseNoKid(toCBOR(payload))
	}
	panic("unknown form " + f)
}

// ---- independent sanity checks of what the generator signs ----

// checkJWS verifies a standard-form JWS with go-jose.
func checkJWS(e elem, pub *ecdsa.PublicKey) error {
	obj, err := jose.ParseSigned(string(e.octets), []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		return err
	}
	_, err = obj.Verify(pub)
	return err
}

// checkCOSE verifies a standard-form COSE_Sign1 with go-cose.
func checkCOSE(e elem, pub *ecdsa.PublicKey) error {
	var m gocose.Sign1Message
	if err := m.UnmarshalCBOR(e.octets); err != nil {
		return err
	}
	v, err := gocose.NewVerifier(gocose.AlgorithmES256, pub)
	if err != nil {
		return err
	}
	return m.Verify(nil, v)
}

// goCOSE signs with go-cose itself (an interop vector).
func (a *agent) goCOSE(payload []byte) elem {
	signer, err := gocose.NewSigner(gocose.AlgorithmES256, a.key)
	if err != nil {
		panic(err)
	}
	msg := gocose.NewSign1Message()
	msg.Headers.Protected.SetAlgorithm(gocose.AlgorithmES256)
	msg.Headers.Protected[gocose.HeaderLabelContentType] = coseCT
	msg.Headers.Protected[gocose.HeaderLabelKeyID] = []byte(a.kid)
	msg.Payload = payload
	if err := msg.Sign(rand.Reader, nil, signer); err != nil {
		panic(err)
	}
	b, err := msg.MarshalCBOR()
	if err != nil {
		panic(err)
	}
	if err := checkCOSE(elem{cose: true, octets: b}, &a.key.PublicKey); err != nil {
		panic(fmt.Sprintf("go-cose message does not verify: %v", err))
	}
	return elem{cose: true, octets: b}
}

// ---- copies anyone on the path can make without the key (D5) ----

// p256N is the order of the P-256 group.
var p256N = elliptic.P256().Params().N

// malleateSig rewrites an R||S signature as (R, N-S), which verifies just
// as well.
func malleateSig(sig []byte) []byte {
	s := new(big.Int).SetBytes(sig[32:])
	out := append([]byte{}, sig[:32]...)
	return append(out, new(big.Int).Sub(p256N, s).FillBytes(make([]byte, 32))...)
}

// malleateJWS returns e's compact JWS with its signature malleated.
func malleateJWS(e elem) elem {
	s := string(e.octets)
	i := strings.LastIndexByte(s, '.')
	sig, err := b64.DecodeString(s[i+1:])
	if err != nil {
		panic(err)
	}
	return elem{octets: []byte(s[:i+1] + b64.EncodeToString(malleateSig(sig)))}
}

// coseParts signs payload under the standard protected header and returns
// the parts, so that a copy can be assembled with another unprotected
// header or a malleated signature.
func (a *agent) coseParts(payload []byte) (prot, sig []byte) {
	prot = toCBOR(coseProt(a.kid))
	return prot, rs(a.key, sigStructure(prot, payload))
}
