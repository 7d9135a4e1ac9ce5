package gateway

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
)

// TestSQLTasks: the shared A2A task store keeps a2a-go's contract (a
// version per save, a stale version refused, an unknown task not
// found), one route's tasks are not another's, and a hop's upstream
// mapping is taken once (decision 86).
func TestSQLTasks(t *testing.T) {
	db, err := sql.Open("pgx", postgresDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for range 2 { // made once, then found
		if err := openTasks(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	coder, other := &sqlTasks{db: db, route: "coder"}, &sqlTasks{db: db, route: "other"}
	task := &a2a.Task{ID: "t-1", ContextID: "ctx-1", Status: a2a.TaskStatus{State: a2a.TaskStateWorking},
		Metadata: map[string]any{"k": map[string]any{"offer": "x.y.z"}}}

	v1, err := coder.Save(ctx, task, nil, nil, a2a.TaskVersionMissing)
	if err != nil || v1 != 1 {
		t.Fatalf("first save: version %d, %v", v1, err)
	}
	task.Status.State = a2a.TaskStateCompleted
	v2, err := coder.Save(ctx, task, nil, nil, v1)
	if err != nil || v2 != 2 {
		t.Fatalf("second save: version %d, %v", v2, err)
	}
	if _, err := coder.Save(ctx, task, nil, nil, v1); !errors.Is(err, a2a.ErrConcurrentTaskModification) {
		t.Fatalf("a save from a stale version: %v, want ErrConcurrentTaskModification", err)
	}
	got, v, err := coder.Get(ctx, "t-1")
	if err != nil || v != 2 || got.Status.State != a2a.TaskStateCompleted || got.Metadata["k"].(map[string]any)["offer"] != "x.y.z" {
		t.Fatalf("get: %+v version %d, %v", got, v, err)
	}
	if _, _, err := other.Get(ctx, "t-1"); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("another route's task: %v, want ErrTaskNotFound", err)
	}
	if _, err := coder.List(ctx, &a2a.ListTasksRequest{}); !errors.Is(err, a2a.ErrUnauthenticated) {
		t.Fatalf("list: %v", err)
	}

	if err := coder.mapUpstream(ctx, "t-1", "up-1", "https://planner.example", "hop-1"); err != nil {
		t.Fatal(err)
	}
	if up, err := coder.upstreamOf(ctx, "t-1"); err != nil || up != "up-1" {
		t.Fatalf("upstreamOf: %q, %v", up, err)
	}
	if own, up, err := other.takeHop(ctx, "https://planner.example", "hop-1"); err != nil || own != "" || up != "" {
		t.Fatalf("another route took the hop: %q %q %v", own, up, err)
	}
	if own, up, err := coder.takeHop(ctx, "https://planner.example", "hop-1"); err != nil || own != "t-1" || up != "up-1" {
		t.Fatalf("takeHop: %q %q %v", own, up, err)
	}
	if own, up, err := coder.takeHop(ctx, "https://planner.example", "hop-1"); err != nil || own != "" || up != "" {
		t.Fatalf("the hop was taken twice: %q %q %v", own, up, err)
	}

	// The sweeper removes what went quiet.
	if err := sweepTasks(ctx, db, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := coder.Get(ctx, "t-1"); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("a swept task: %v", err)
	}
}
