package handoff_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
)

// BenchmarkChainDepth is the cost of receiving an offer against the
// length of its chain (issue 19; scripts/scaling.sh plots it): cold, every
// element verified (across cores at the default GOMAXPROCS; -cpu 1 for
// one at a time), and warm, the chain's prefix found in a ChainCache.
func BenchmarkChainDepth(b *testing.B) {
	for _, warm := range []bool{false, true} {
		for n := 1; n <= 16; n++ {
			name := fmt.Sprintf("cold/depth=%02d", n)
			if warm {
				name = fmt.Sprintf("warm/depth=%02d", n)
			}
			b.Run(name, func(b *testing.B) {
				var c *benchCase
				if warm {
					c = chainCase(b, n, handoff.NewChainCache(1024, 16<<20))
				} else {
					c = chainCase(b, n)
				}
				runReceive(b, c)
			})
		}
	}
}

// rateSample is one offered rate's measurement in TestScalingRate.
type rateSample struct {
	Offered    int     `json:"offered"`    // offers a second asked for
	Achieved   float64 `json:"achieved"`   // offers a second received
	P50us      float64 `json:"p50_us"`     // latency of one receive
	P99us      float64 `json:"p99_us"`     //
	CPUusPerOp float64 `json:"cpu_us_op"`  // process CPU time per offer
	Depth      int     `json:"depth"`      // the chain's length
	Warm       bool    `json:"warm_cache"` // with a shared ChainCache
}

// TestScalingRate measures, for scripts/scaling.sh, the cost of an offer
// against the offered rate: offers with a chain of 4 (fresh hops, one
// prefix) at a paced rate for two seconds each, received by 8 goroutines
// sharing one receiver and its ChainCache, as a gateway's requests do. It
// writes one JSON line per rate to $HANDOFF_SCALING_OUT and runs only
// when that is set: it measures, it does not judge (these machines are
// shared).
func TestScalingRate(t *testing.T) {
	out := os.Getenv("HANDOFF_SCALING_OUT")
	if out == "" {
		t.Skip("HANDOFF_SCALING_OUT is not set: run by scripts/scaling.sh")
	}
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const depth = 4
	for _, warm := range []bool{true, false} {
		for _, rate := range []int{250, 500, 1000, 2000, 4000, 8000} {
			s := measureRate(t, depth, warm, rate, 2*time.Second)
			b, _ := json.Marshal(s)
			fmt.Fprintf(f, "%s\n", b)
			t.Logf("%s", b)
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func measureRate(t *testing.T, depth int, warm bool, rate int, d time.Duration) rateSample {
	t.Helper()
	var cache *handoff.ChainCache
	if warm {
		cache = handoff.NewChainCache(1024, 16<<20)
	}
	// Enough distinct offers for the run, signed before it starts.
	n := rate * int(d/time.Second)
	c := chainCaseN(t, depth, n, cache)
	ctx := context.Background()
	if warm {
		if res, _ := c.r.Receive(ctx, c.msgs[0], ""); res == nil || res.Outcome != handoff.Accepted {
			t.Fatal("warming the cache failed")
		}
		c.msgs = c.msgs[1:]
	}
	lat := make([]time.Duration, len(c.msgs))
	var next atomic.Int64
	jobs := make(chan int, 1024)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				t0 := time.Now()
				res, _ := c.r.Receive(ctx, c.msgs[i], "")
				lat[i] = time.Since(t0)
				if res == nil || res.Outcome != handoff.Accepted {
					t.Errorf("offer %d not accepted", i)
				}
				next.Add(1)
			}
		})
	}
	interval := time.Second / time.Duration(rate)
	cpu0, start := cpuTime(), time.Now()
	for i := range c.msgs {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	took, cpu := time.Since(start), cpuTime()-cpu0
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e3 }
	return rateSample{Offered: rate, Achieved: float64(len(c.msgs)) / took.Seconds(), P50us: q(0.5), P99us: q(0.99),
		CPUusPerOp: float64(cpu) / 1e3 / float64(len(c.msgs)), Depth: depth, Warm: warm}
}
