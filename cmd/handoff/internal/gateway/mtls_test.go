package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
)

// testCA issues certificates for the tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue makes a leaf certificate for cn with the given URI SANs (a
// server's for 127.0.0.1 when server is set) and returns it with its
// PEM files' contents.
func (ca *testCA) issue(t *testing.T, cn string, server bool, uris ...string) (tls.Certificate, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair, certPEM, keyPEM
}

// TestGatewayClientCertificate (issue 16, inbound identity; draft
// "Replay and Freshness": statuses are resent only to iss): over TLS, a
// caller whose client certificate, verified against tls.client_ca_file,
// carries a name inbound.client_certs_file maps to the offer's iss is
// resent the recorded status without any bearer token. A caller with no
// certificate, one the CA did not issue, or a token and a certificate
// that name two AgentIds, is not.
func TestGatewayClientCertificate(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	ctx := context.Background()
	ca := newTestCA(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, srvCert, srvKey := ca.issue(t, "gateway", true)
	doc := fmt.Sprintf(`listen: 127.0.0.1:0
identity: {id: "https://tester.example", key_env: HANDOFF_TEST_MTLS_KEY}
trust_file: %s
tls: {cert_file: %s, key_file: %s, client_ca_file: %s}
inbound: {client_certs_file: %s}
routes:
  - {name: tools, protocol: mcp, path: /tools/, upstream: %q}
`, write("trust.json", []byte(`{"agents": []}`)), write("gw.pem", srvCert), write("gw-key.pem", srvKey), write("ca.pem", ca.pem),
		write("certs.json", []byte(`{"https://planner.example": "https://planner.example", "other": "https://other.example"}`)),
		r.gw.cfg.Load().Routes[0].Upstream.String())
	c, err := Parse([]byte(doc), dir)
	if err != nil {
		t.Fatal(err)
	}
	jwk, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "testdata", "example", "coder.jwk"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HANDOFF_TEST_MTLS_KEY", string(jwk))
	res, err := c.Open()
	if err != nil {
		t.Fatal(err)
	}
	if res.TLS == nil || res.TLS.ClientAuth != tls.VerifyClientCertIfGiven || len(res.CertIDs) != 2 {
		t.Fatalf("Open: TLS %+v, CertIDs %v", res.TLS, res.CertIDs)
	}
	// The rig's key, trust and tokens; the TLS and names Open read.
	res.Signer, res.Keys, res.Tokens = r.res.Signer, r.res.Keys, r.res.Tokens
	c.Store = "sqlite:" + backdatedSQLite(t)
	gw, err := New(ctx, c, res, r.gw.log)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewUnstartedServer(gw.Handler())
	front.TLS = res.TLS
	front.StartTLS()
	t.Cleanup(func() { front.Close(); gw.Drain(ctx); gw.Close() })
	r.url = front.URL + "/tools"

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)
	client := func(token string, certs ...tls.Certificate) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}
		return &http.Client{Transport: tokenTransport{token, tr}}
	}
	planner, _, _ := ca.issue(t, "planner", false, "https://planner.example")
	other, _, _ := ca.issue(t, "other", false)
	stranger, _, _ := newTestCA(t).issue(t, "planner", false, "https://planner.example")

	hc, cs := r.connectWith(t, client("", planner), nil)
	h, hop := r.offer(t, cs, "run the tests, over TLS")
	rep, err := hc.Call(ctx, cs, call("ok"), h)
	if err != nil || rep.State != handoff.StateCompleted {
		t.Fatalf("%+v %v", rep, err)
	}
	again, err := hc.Ask(ctx, cs, hop)
	if err != nil || again.Status == nil {
		t.Fatalf("the caller with the planner's certificate was not resent the status: %+v %v", again, err)
	}

	v, err := mcphandoff.HandoffValue(h, handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		client *http.Client
	}{
		{"no certificate", client("")},
		{"another agent's certificate", client("", other)},
		{"a token and a certificate of two agents", client(plannerToken, other)},
	} {
		_, cs2 := r.connectWith(t, c.client, nil)
		p := call("ok")
		p.Meta = mcp.Meta{mcphandoff.Key: v}
		res, err := cs2.CallTool(ctx, p)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if res.Meta[mcphandoff.Key] != nil || !strings.Contains(resultText(res), "retransmission") {
			t.Errorf("%s: %q, status %v", c.name, resultText(res), res.Meta[mcphandoff.Key] != nil)
		}
	}
	// A certificate from another CA does not get past the handshake.
	_, err = client("", stranger).Get(r.url)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a certificate the CA did not issue: %v", err)
	}
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
}
