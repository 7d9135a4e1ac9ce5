package handoff_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/quantumlearningmachines/handoff"
)

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// rememberStream feeds m a steady stream: perSecond offers a second for
// seconds seconds of its clock, each remembered until exp plus the skew
// (300 + 60 s, the defaults of D4), as the receiver does. The pairs'
// texts are sliced from a payload-sized buffer, as decoded offers' are.
func rememberStream(t testing.TB, m *handoff.Memory, clock *time.Time, from, seconds, perSecond int) {
	t.Helper()
	ctx := context.Background()
	for s := range seconds {
		*clock = benchNow.Add(time.Duration(from+s) * time.Second)
		for i := range perSecond {
			payload := []byte(fmt.Sprintf(`{"iss":"https://agent-%03d.example","hop":"hop-%09d-%03d","pad":"%0900d"}`, i%50, from+s, i, 0))
			// Texts that alias their payload, as the decoder's may.
			iss, hop := unsafe.String(&payload[8], 27), unsafe.String(&payload[42], 17)
			d := handoff.DigestOf(payload)
			if _, stored, err := m.Remember(ctx, iss, hop, handoff.Element{}, handoff.Seen{Digest: d, Content: d}, clock.Add(360*time.Second)); err != nil || !stored {
				t.Fatalf("Remember: %v %v", stored, err)
			}
		}
	}
}

// TestMemoryFlatUnderSteadyStream (issue 19): the replay memory of a
// receiver taking a steady stream of offers stays flat: entries past
// their keep time are swept, so its size is set by the rate and the
// window, not by how long it has run. Bytes per remembered hop are
// measured and logged (docs/scaling.md).
func TestMemoryFlatUnderSteadyStream(t *testing.T) {
	if testing.Short() {
		t.Skip("a stream of 240,000 offers")
	}
	const perSecond = 20 // 7,200 pairs in a 360 s window
	clock := benchNow
	m := handoff.NewMemory(func() time.Time { return clock })
	base := heapInUse()
	rememberStream(t, m, &clock, 0, 2000, perSecond)
	early, earlyLen := heapInUse()-base, m.Len()
	rememberStream(t, m, &clock, 2000, 10000, perSecond)
	late, lateLen := heapInUse()-base, m.Len()
	window := perSecond * 360
	t.Logf("after 40,000 offers: %d pairs, %d bytes (%d a pair); after 240,000: %d pairs, %d bytes (%d a pair)",
		earlyLen, early, early/int64(earlyLen), lateLen, late, late/int64(lateLen))
	// The sweep runs once the inserts since the last reach half the
	// entries: at most about 1.5 windows are held.
	if lateLen > window*3/2+1024 || earlyLen > window*3/2+1024 {
		t.Fatalf("%d then %d pairs held for a window of %d", earlyLen, lateLen, window)
	}
	if late > early*5/4+64<<10 {
		t.Fatalf("the memory grew from %d to %d bytes under a steady stream", early, late)
	}
	// A pair costs its own texts, digests and map slot (about 600 bytes,
	// the map sized for its peak), not the ~1 KiB payload its texts were
	// sliced from, which would make it some 1,600.
	if per := late / int64(lateLen); per > 900 {
		t.Fatalf("%d bytes a remembered pair", per)
	}
	runtime.KeepAlive(m)
}

// BenchmarkMemoryBytesPerHop reports the heap bytes one remembered pair
// costs in the in-process replay memory (bytes/hop), with the map at its
// steady size.
func BenchmarkMemoryBytesPerHop(b *testing.B) {
	clock := benchNow
	m := handoff.NewMemory(func() time.Time { return clock })
	base := heapInUse()
	n := 0
	for b.Loop() {
		rememberStream(b, m, &clock, n, 1, 1000)
		n++
	}
	b.ReportMetric(float64(heapInUse()-base)/float64(m.Len()), "bytes/hop")
	runtime.KeepAlive(m)
}
