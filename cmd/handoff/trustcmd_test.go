package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/quantumlearningmachines/handoff/trust"
)

// TestTrustAddConcurrent: runs of "trust add" at once on one trust file
// each keep their key; without the folder lock, a run that read the file
// before another replaced it wrote its own key over the other's.
func TestTrustAddConcurrent(t *testing.T) {
	dir := t.TempDir()
	const n = 12
	for i := range n {
		var key, pub bytes.Buffer
		if code := run([]string{"keygen"}, env{nil, &key, os.Stderr}); code != 0 {
			t.Fatalf("keygen: exit %d", code)
		}
		kf := filepath.Join(dir, fmt.Sprintf("k%d.jwk", i))
		if err := os.WriteFile(kf, key.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		if code := run([]string{"pubkey", kf}, env{nil, &pub, os.Stderr}); code != 0 {
			t.Fatalf("pubkey: exit %d", code)
		}
		if err := os.WriteFile(kf+".pub", pub.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tf := filepath.Join(dir, "trust.json")
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var stderr bytes.Buffer
			args := []string{"trust", "add", "--id", fmt.Sprintf("https://a%d.example", i), filepath.Join(dir, fmt.Sprintf("k%d.jwk.pub", i)), tf}
			if code := run(args, env{nil, &bytes.Buffer{}, &stderr}); code != 0 {
				t.Errorf("trust add %d: exit %d: %s", i, code, stderr.String())
			}
		}()
	}
	wg.Wait()
	c, err := trust.Load(tf)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(c.Agents()); got != n {
		t.Fatalf("the trust file names %d agents after %d concurrent adds, want %d", got, n, n)
	}
}
