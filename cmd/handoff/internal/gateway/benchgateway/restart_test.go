package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestRestartUnderLoad: the load tool's restart phase, short. The real
// handoff binary is drained and killed under load and started again on
// its store; no hop record is lost and no work runs twice upstream
// (issue 16; draft "Freshness and Replay": a retransmission is not
// processed again).
func TestRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the handoff command")
	}
	bin := filepath.Join(t.TempDir(), "handoff")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/quantumlearningmachines/handoff/cmd/handoff").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := restartPhase(context.Background(), bin, 4, 256, 3*time.Second); err != nil {
		t.Fatal(err)
	}
}
