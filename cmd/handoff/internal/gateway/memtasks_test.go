package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
)

func sampleTask(id string, state a2a.TaskState) *a2a.Task {
	return &a2a.Task{ID: a2a.TaskID(id), ContextID: "ctx", Status: a2a.TaskStatus{State: state},
		History:  []*a2a.Message{a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "run the tests"})},
		Metadata: map[string]any{"k": map[string]any{"n": 1.0}}}
}

// TestMemTasksVersions: a2a-go's optimistic concurrency, as its own
// memory store and sqlTasks keep it: each save is the next version, and
// a save from a stale version is refused.
func TestMemTasksVersions(t *testing.T) {
	ctx := context.Background()
	m := newMemTasks()
	v1, err := m.Save(ctx, sampleTask("t1", a2a.TaskStateSubmitted), nil, nil, a2a.TaskVersionMissing)
	if err != nil || v1 != 1 {
		t.Fatalf("first save: version %d, %v", v1, err)
	}
	v2, err := m.Save(ctx, sampleTask("t1", a2a.TaskStateWorking), nil, nil, v1)
	if err != nil || v2 != 2 {
		t.Fatalf("second save: version %d, %v", v2, err)
	}
	if _, err := m.Save(ctx, sampleTask("t1", a2a.TaskStateCompleted), nil, nil, v1); !errors.Is(err, a2a.ErrConcurrentTaskModification) {
		t.Fatalf("a save from version 1 after version 2: %v, want ErrConcurrentTaskModification", err)
	}
	got, v, err := m.Get(ctx, "t1")
	if err != nil || v != 2 || got.Status.State != a2a.TaskStateWorking {
		t.Fatalf("get: %v version %d, %v", got, v, err)
	}
	if _, _, err := m.Get(ctx, "nope"); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("get of an unknown task: %v", err)
	}
	if _, err := m.Save(ctx, &a2a.Task{}, nil, nil, a2a.TaskVersionMissing); err == nil {
		t.Fatal("a task with no id was stored")
	}
	if _, err := m.List(ctx, &a2a.ListTasksRequest{}); !errors.Is(err, a2a.ErrUnauthenticated) {
		t.Fatalf("list: %v, want it refused", err)
	}
}

// TestMemTasksCopies: what a caller does to a task it saved or read
// does not change the stored task (a2a-go and a2ahandoff edit the tasks
// they hold, metadata maps included).
func TestMemTasksCopies(t *testing.T) {
	ctx := context.Background()
	m := newMemTasks()
	task := sampleTask("t1", a2a.TaskStateWorking)
	v, err := m.Save(ctx, task, nil, nil, a2a.TaskVersionMissing)
	if err != nil {
		t.Fatal(err)
	}
	task.Status.State = a2a.TaskStateFailed
	task.Metadata["k"].(map[string]any)["n"] = 2.0
	got, _, err := m.Get(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	got.History = nil
	got.Metadata["k"].(map[string]any)["n"] = 3.0
	again, v2, err := m.Get(ctx, "t1")
	if err != nil || v2 != v {
		t.Fatal(v2, err)
	}
	if again.Status.State != a2a.TaskStateWorking || len(again.History) != 1 || again.Metadata["k"].(map[string]any)["n"] != 1.0 {
		t.Fatalf("the stored task changed with its copies: %+v", again)
	}
}

// TestMemTasksForget: ended tasks are bounded. Past the limit the least
// recently updated ended tasks go (one updated since stays), and a task
// not updated for taskRetention, ended or not, is neither returned nor
// kept.
func TestMemTasksForget(t *testing.T) {
	ctx := context.Background()
	m := newMemTasks()
	m.limit = 3
	clock := time.Unix(1_800_000_000, 0)
	m.now = func() time.Time { return clock }
	for i := range 3 {
		if _, err := m.Save(ctx, sampleTask(fmt.Sprint("t", i), a2a.TaskStateCompleted), nil, nil, a2a.TaskVersionMissing); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(time.Second)
	}
	// t0 is updated: t1 is now the least recently updated.
	if _, err := m.Save(ctx, sampleTask("t0", a2a.TaskStateCompleted), nil, nil, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Save(ctx, sampleTask("t3", a2a.TaskStateFailed), nil, nil, a2a.TaskVersionMissing); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Save(ctx, sampleTask("w", a2a.TaskStateWorking), nil, nil, a2a.TaskVersionMissing); err != nil {
		t.Fatal(err)
	}
	if n := m.len(); n != 4 {
		t.Fatalf("%d tasks kept, want 3 ended and 1 working", n)
	}
	for id, want := range map[a2a.TaskID]bool{"t0": true, "t1": false, "t2": true, "t3": true, "w": true} {
		if _, _, err := m.Get(ctx, id); (err == nil) != want {
			t.Errorf("task %s: %v, want kept %v", id, err, want)
		}
	}
	clock = clock.Add(taskRetention)
	for _, id := range []a2a.TaskID{"t3", "w"} {
		if _, _, err := m.Get(ctx, id); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Fatalf("task %s past its keeping: %v", id, err)
		}
	}
	if _, err := m.Save(ctx, sampleTask("t4", a2a.TaskStateWorking), nil, nil, a2a.TaskVersionMissing); err != nil {
		t.Fatal(err)
	}
	if n := m.len(); n != 1 {
		t.Fatalf("%d tasks kept after the others' keeping ended, want 1", n)
	}
}

// TestMemTasksFloodKeepsLiveTasks: ten times the limit of ended tasks (a
// flood of refused messages is one) leave the store at its limit, and a
// task still running or waiting for its caller is still there, so its
// hop's signed cancel (tasks/cancel, which a2a-go answers only for a
// task it finds) and a follow-up still reach it.
func TestMemTasksFloodKeepsLiveTasks(t *testing.T) {
	ctx := context.Background()
	m := newMemTasks()
	m.limit = 1000
	for _, id := range []string{"running", "paused"} {
		st := map[string]a2a.TaskState{"running": a2a.TaskStateWorking, "paused": a2a.TaskStateInputRequired}[id]
		if _, err := m.Save(ctx, sampleTask(id, st), nil, nil, a2a.TaskVersionMissing); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 * m.limit {
		if _, err := m.Save(ctx, sampleTask(fmt.Sprint("t", i), a2a.TaskStateRejected), nil, nil, a2a.TaskVersionMissing); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.len(); n != m.limit+2 {
		t.Fatalf("%d tasks kept, want the limit (%d) and the 2 live ones", n, m.limit)
	}
	for _, id := range []a2a.TaskID{"running", "paused"} {
		if _, _, err := m.Get(ctx, id); err != nil {
			t.Errorf("the %s task after the flood: %v", id, err)
		}
	}
}

// TestMemTasksBytes: the ended tasks' JSON is bounded too, so a few large
// tasks cannot hold what a count bound would allow.
func TestMemTasksBytes(t *testing.T) {
	ctx := context.Background()
	m := newMemTasks()
	m.most = 64 << 10
	big := sampleTask("", a2a.TaskStateFailed)
	big.History = []*a2a.Message{a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: strings.Repeat("x", 10<<10)})}
	for i := range 20 {
		big.ID = a2a.TaskID(fmt.Sprint("big", i))
		if _, err := m.Save(ctx, big, nil, nil, a2a.TaskVersionMissing); err != nil {
			t.Fatal(err)
		}
	}
	m.mu.Lock()
	bytes, n := m.bytes, m.ended.Len()
	m.mu.Unlock()
	if bytes > m.most || n >= 20 || n == 0 {
		t.Fatalf("%d ended tasks of %d octets kept, bound %d octets", n, bytes, m.most)
	}
	if _, _, err := m.Get(ctx, "big19"); err != nil {
		t.Fatalf("the newest task: %v", err)
	}
}
