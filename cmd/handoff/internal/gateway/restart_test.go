package gateway

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
)

// TestGatewayRestart: a gateway that stops while a hop's work runs, and
// a new one on the same store at the same address. The hop's record
// survives: asked again, the new gateway answers with the recorded
// "accepted" octets and does not send the work to the upstream again.
func TestGatewayRestart(t *testing.T) {
	r := newRig(t, "reject") // its upstream, keys and planner; its own gateway is not used
	ctx := context.Background()
	db := backdatedSQLite(t)
	c, err := Parse([]byte(fmt.Sprintf(`listen: 127.0.0.1:0
identity: {id: "https://coder.example", key_env: UNUSED}
trust_file: trust.json
store: sqlite:%s
routes:
  - {name: coder, protocol: a2a, path: /coder/, upstream: %q, without_handoff: reject}
`, db, r.upstream.URL+"/")), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	start := func(c *Config) *Server {
		gw, err := New(ctx, c, &Resources{Signer: r.coder, Keys: r.keys, Tokens: map[string]string{plannerToken: "https://planner.example"}},
			slog.New(slog.NewTextHandler(r.logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return gw
	}
	// One address; the gateway behind it is swapped.
	var current atomic.Pointer[Server]
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		current.Load().Handler().ServeHTTP(w, req)
	}))
	defer front.Close()
	first := start(c)
	current.Store(first)
	r.url = front.URL + "/coder/"
	cl, _ := r.client(t, plannerToken)

	m := msg("block")
	noWait := false
	rep, err := cl.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-restart", Work: "long"}, m, &a2a.MessageSendConfig{Blocking: &noWait})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Statuses) == 0 {
		t.Fatalf("no accepted status: %+v", rep)
	}
	accepted := rep.Statuses[len(rep.Statuses)-1].Octets
	<-r.agent.started

	// The first gateway goes away with the work still running upstream.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	// The second starts with recover_on_start: the hop cut off is
	// flagged for the operator, and the gauges say so.
	rc := *c
	rc.RecoverOnStart = true
	second := start(&rc)
	defer second.Close()
	current.Store(second)
	flags, err := second.store.Flags(ctx, false)
	if err != nil || len(flags) != 1 || flags[0].Kind != store.FlagUnknownOutcome || flags[0].Hop != rep.Hop {
		t.Fatalf("flags after recover_on_start: %+v %v", flags, err)
	}
	mfs, err := second.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gauges := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			gauges[name] = m.GetGauge().GetValue()
		}
	}
	if gauges["handoff_gateway_open_flags/"+store.FlagUnknownOutcome] != 1 || gauges["handoff_gateway_unresolved_hops"] != 1 {
		t.Errorf("gauges: open flags %v, unresolved %v", gauges["handoff_gateway_open_flags/"+store.FlagUnknownOutcome], gauges["handoff_gateway_unresolved_hops"])
	}

	again, err := cl.Ask(ctx, rep.Hop)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Statuses) == 0 || !bytes.Equal(again.Statuses[len(again.Statuses)-1].Octets, accepted) {
		t.Fatalf("asked again after the restart: %+v, want the recorded accepted octets", again.Statuses)
	}
	if n := r.agent.runs.Load(); n != 1 {
		t.Fatalf("the upstream ran the work %d times", n)
	}
	if !strings.Contains(r.logs.String(), "verdict=retransmission") {
		t.Errorf("the second gateway did not see a retransmission:\n%s", r.logs.String())
	}
}
