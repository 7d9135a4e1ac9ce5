package gateway

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/postgres"
)

// TestGatewayReplicas (SPEC.md section 6: "Several gateways on one
// PostgreSQL store behave as one delegate"): two gateways on one
// database, no sticky sessions. The same offer sent to both at once runs
// upstream once; a retransmission to the other replica gets the
// identical status octets; concurrent retransmissions to both agree.
func TestGatewayReplicas(t *testing.T) {
	rr := newReplicas(t)
	r, dl, clients := rr.rig, rr.dl, rr.clients
	ctx := context.Background()

	// The same offer to both replicas at once.
	h, issued, err := dl.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-r", Work: "run the tests"})
	if err != nil {
		t.Fatal(err)
	}
	m := msg("complete")
	m.ContextID = "ctx-r"
	var wg sync.WaitGroup
	replies := make([]*a2ahandoff.Reply, 2)
	errs := make([]error, 2)
	for i, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mm := *m
			mm.ID = fmt.Sprintf("m-%d", i)
			replies[i], errs[i] = cl.Send(ctx, issued.Hop, h, &mm, nil)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		if replies[i].Refused != nil {
			t.Fatalf("replica %d refused: %v", i, replies[i].Refused)
		}
	}
	if n := r.agent.runs.Load(); n != 1 {
		t.Fatalf("the same offer sent to two replicas ran upstream %d times", n)
	}

	// Asked again on both replicas until the hop is complete: every answer
	// after that carries the same final status octets.
	deadline := time.Now().Add(10 * time.Second)
	var final []byte
	for final == nil {
		rep, err := clients[1].Ask(ctx, issued.Hop)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Issued != nil && rep.Issued.Resolved {
			final = rep.Statuses[len(rep.Statuses)-1].Octets
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hop never completed: %+v", rep.Issued)
		}
		time.Sleep(20 * time.Millisecond)
	}
	asks := make([][]byte, 8)
	for i := range asks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := clients[i%2].Ask(ctx, issued.Hop)
			if err != nil {
				t.Error(err)
				return
			}
			if len(rep.Statuses) > 0 {
				asks[i] = rep.Statuses[len(rep.Statuses)-1].Octets
			}
		}()
	}
	wg.Wait()
	for i, b := range asks {
		if !bytes.Equal(b, final) {
			t.Errorf("retransmission %d to replica %d: other octets than the recorded status", i, i%2)
		}
	}
	if n := r.agent.runs.Load(); n != 1 {
		t.Fatalf("the upstream ran %d times", n)
	}
}

// replicas are two gateways on one PostgreSQL database in front of the
// rig's upstream, and a client of each for one delegator.
type replicas struct {
	*rig
	dl      *delegator.Delegator
	clients []*a2ahandoff.Client
	raw     []*a2aclient.Client // the same, with no handoff
	store   store.Store         // the shared store, read by the test
	urls    []string            // each replica's route
}

func newReplicas(t *testing.T) *replicas {
	t.Helper()
	return newReplicasWith(t, map[string]string{plannerToken: "https://planner.example"})
}

// newReplicasWith is newReplicas with the gateways' inbound tokens, and
// wrappers around the rig's upstream.
func newReplicasWith(t *testing.T, tokens map[string]string, wrap ...func(http.Handler) http.Handler) *replicas {
	t.Helper()
	dsn := postgresDatabase(t)
	r := newRig(t, "reject") // its upstream, keys and planner; its own gateway is not used
	for _, w := range wrap {
		r.upstream.Config.Handler = w(r.upstream.Config.Handler)
	}
	ctx := context.Background()
	pre, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	// An empty store whose memory began a minute ago (see newRigWith).
	if err := pre.Forget(ctx, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	pre.Close()

	doc := fmt.Sprintf(`listen: 127.0.0.1:0
identity: {id: "https://coder.example", key_env: UNUSED}
trust_file: trust.json
store: %q
routes:
  - {name: coder, protocol: a2a, path: /coder/, upstream: %q, without_handoff: reject}
`, dsn, r.upstream.URL+"/")
	c, err := Parse([]byte(doc), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for i := range 2 {
		log := slog.New(slog.NewTextHandler(r.logs, nil)).With("replica", i)
		gw, err := New(ctx, c, &Resources{Signer: r.coder, Keys: r.keys, Tokens: tokens}, log)
		if err != nil {
			t.Fatal(err)
		}
		front := httptest.NewServer(gw.Handler())
		t.Cleanup(func() { front.Close(); gw.Close() })
		urls = append(urls, front.URL+"/coder/")
	}
	// One delegator, a client for each replica.
	dl, err := delegator.New(delegator.Config{Me: "https://planner.example", Signer: r.planner, Keys: r.keys, Store: store.NewFirstMemory()})
	if err != nil {
		t.Fatal(err)
	}
	var clients []*a2ahandoff.Client
	var raw []*a2aclient.Client
	for _, u := range urls {
		ac, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: u, Transport: a2a.TransportProtocolJSONRPC}}, a2aclient.WithInterceptors(bearer{token: plannerToken}))
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, ac)
		cl, err := a2ahandoff.NewClient(ac, dl, a2ahandoff.ClientOptions{Encoding: handoff.JSON})
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, cl)
	}

	st, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &replicas{rig: r, dl: dl, clients: clients, raw: raw, store: st, urls: urls}
}

// postgresDatabase is a fresh database on HANDOFF_TEST_POSTGRES (which
// scripts/test.sh starts), as a postgres:// URL, the form the gateway's
// store key takes; skipped when unset, failed in CI.
func postgresDatabase(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("HANDOFF_TEST_POSTGRES")
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("HANDOFF_TEST_POSTGRES is not set: run the tests through scripts/test.sh, which starts PostgreSQL")
		}
		t.Skip("HANDOFF_TEST_POSTGRES is not set (scripts/test.sh starts a throwaway PostgreSQL)")
	}
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	name := fmt.Sprintf("gateway_%d", time.Now().UnixNano())
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if a, err := sql.Open("pgx", dsn); err == nil {
			a.Exec("DROP DATABASE " + name + " WITH (FORCE)")
			a.Close()
		}
	})
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		u.Path = "/" + name
		return u.String()
	}
	// key=value form: the same as a URL's query.
	q := url.Values{}
	for _, f := range strings.Fields(dsn) {
		if k, v, ok := strings.Cut(f, "="); ok && k != "dbname" {
			q.Set(k, v)
		}
	}
	return (&url.URL{Scheme: "postgres", Path: "/" + name, RawQuery: q.Encode()}).String()
}

// TestGatewayReplicasCancel: no sticky sessions for a task either. A
// task taken by one replica is read (tasks/get), followed
// (tasks/resubscribe) and canceled (tasks/cancel with the delegator's
// signed "canceled") through the other: the tasks live in the shared store, and the cancel reaches the
// upstream task that the first replica started.
func TestGatewayReplicasCancel(t *testing.T) {
	rr := newReplicas(t)
	r, dl, clients := rr.rig, rr.dl, rr.clients
	ctx := context.Background()
	h, issued, err := dl.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-rc", Work: "long"})
	if err != nil {
		t.Fatal(err)
	}
	m := msg("block")
	m.ContextID = "ctx-rc"
	noWait := false
	rep, err := clients[0].Send(ctx, issued.Hop, h, m, &a2a.MessageSendConfig{Blocking: &noWait})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Task == nil {
		t.Fatalf("no task in the reply: %+v", rep)
	}
	<-r.agent.started

	// The other replica knows the task.
	got, err := rr.raw[1].GetTask(ctx, &a2a.TaskQueryParams{ID: rep.Task.ID})
	if err != nil {
		t.Fatalf("tasks/get on the other replica: %v", err)
	}
	if got.ID != rep.Task.ID || got.Status.State.Terminal() {
		t.Fatalf("tasks/get on the other replica: task %s in state %s", got.ID, got.Status.State)
	}

	// And follows it (tasks/resubscribe), though the task runs on the
	// first: the stream ends with the task's end.
	followed := make(chan []a2a.Event, 1)
	go func() {
		var evs []a2a.Event
		for ev, err := range rr.raw[1].ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: rep.Task.ID}) {
			if err != nil {
				t.Errorf("tasks/resubscribe on the other replica: %v", err)
				break
			}
			evs = append(evs, ev)
		}
		followed <- evs
	}()

	// And cancels it, the delegator's signed "canceled" sent there
	// (a2ahandoff.Client keeps its hops' tasks per client): the
	// upstream's task stops.
	st, _, err := dl.Cancel(ctx, issued.Hop)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := rr.raw[1].CancelTask(ctx, &a2a.TaskIDParams{ID: rep.Task.ID, Metadata: map[string]any{a2ahandoff.Key: st.Text()}})
	if err != nil {
		t.Fatalf("cancel through the other replica: %v", err)
	}
	if ct.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("cancel through the other replica: %s", ct.Status.State)
	}
	for deadline := time.Now().Add(10 * time.Second); r.agent.canceled.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := r.agent.canceled.Load(); n != 1 {
		t.Fatalf("the upstream saw %d cancels", n)
	}
	rec, err := rr.store.Get(ctx, "https://planner.example", issued.Hop)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Canceled {
		t.Errorf("the hop's record does not say canceled: %+v", rec)
	}
	// The upstream's task ended canceled, so what the work did is not
	// known: the hop stays accepted and is flagged for the operator (the
	// replica that ran it saw the end), as on one gateway.
	for deadline := time.Now().Add(10 * time.Second); ; {
		flags, err := rr.store.Flags(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(flags, func(f store.Flag) bool { return f.Hop == issued.Hop && f.Kind == store.FlagUnknownOutcome }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the canceled hop was not flagged: %+v\n%s", flags, r.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case evs := <-followed:
		if len(evs) == 0 {
			t.Fatal("tasks/resubscribe on the other replica: no event")
		}
		if last, ok := evs[len(evs)-1].(*a2a.Task); !ok || last.Status.State != a2a.TaskStateCanceled {
			t.Fatalf("tasks/resubscribe on the other replica: the last event is %#v", evs[len(evs)-1])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tasks/resubscribe on the other replica did not end with the task")
	}
	// Both replicas now read the task canceled.
	for i := range 2 {
		got, err := rr.raw[i].GetTask(ctx, &a2a.TaskQueryParams{ID: rep.Task.ID})
		if err != nil {
			t.Fatalf("replica %d: tasks/get: %v", i, err)
		}
		if got.Status.State != a2a.TaskStateCanceled {
			t.Errorf("replica %d: tasks/get: state %s", i, got.Status.State)
		}
	}
}
