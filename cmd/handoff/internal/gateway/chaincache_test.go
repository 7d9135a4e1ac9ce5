package gateway

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/quantumlearningmachines/handoff/trust"
)

// TestChainCacheShared (issue 19): the routes share one cache of verified
// chain elements, its use shows in the metrics, and a new trust file (a
// reload) misses everything the old keys verified.
func TestChainCacheShared(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	metrics := func() string {
		t.Helper()
		resp, err := r.adminCA.Get(r.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	want := func(lines ...string) {
		t.Helper()
		body := metrics()
		for _, l := range lines {
			if !strings.Contains(body, "\n"+l+"\n") {
				t.Errorf("/metrics has no %q", l)
			}
		}
	}
	first := r.offer(t, consoleUser, consolePlanner, "", "ctx-cache", nil, nil)
	// Two hops from the planner with the same one-element chain: the
	// element is verified for the first, found for the second.
	r.send(t, r.offer(t, consolePlanner, "https://coder.example", "", "ctx-cache", first, nil), "ctx-cache", "complete")
	r.send(t, r.offer(t, consolePlanner, "https://coder.example", "", "ctx-cache", first, nil), "ctx-cache", "complete")
	want(`handoff_gateway_chain_cache_lookups_total{result="hit"} 1`, `handoff_gateway_chain_cache_lookups_total{result="miss"} 1`)

	// The same keys, reloaded: a new generation, a miss.
	b, err := json.Marshal(r.keys)
	if err != nil {
		t.Fatal(err)
	}
	reloaded, err := trust.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	r.gw.keys.Store(reloaded)
	r.send(t, r.offer(t, consolePlanner, "https://coder.example", "", "ctx-cache", first, nil), "ctx-cache", "complete")
	want(`handoff_gateway_chain_cache_lookups_total{result="hit"} 1`, `handoff_gateway_chain_cache_lookups_total{result="miss"} 2`)
	if s := r.gw.chains.Stats(); s.Entries == 0 || s.Bytes <= 0 {
		t.Errorf("cache %+v", s)
	}
}
