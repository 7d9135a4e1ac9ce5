package gateway

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
)

// memTasks is an a2a route's a2asrv.TaskStore on a one-process gateway
// (SQLite store): its tasks in memory, as a2a-go's own memory store keeps
// them, with two differences that matter under load.
//
//   - A task is kept as its JSON, so that a copy in and a copy out cost one
//     encoding each. a2a-go's store copies through a new gob encoder and
//     decoder every time, which compiles the task's types anew: a quarter
//     of the gateway's CPU in scripts/bench-gateway.sh.
//   - It forgets. a2a-go's store keeps every task for the life of the
//     process, so a gateway under a steady load grows without bound;
//     this one drops a task not updated for taskRetention, and the least
//     recently updated tasks beyond memTaskLimit (a task that long
//     untouched has ended, or waits on a caller that is not coming back;
//     its hop's record in the store is what answers for it after that).
type memTasks struct {
	mu    sync.Mutex
	tasks map[a2a.TaskID]*list.Element // of *memTask, oldest update first
	order *list.List
	limit int
	keep  time.Duration
	now   func() time.Time
}

type memTask struct {
	id      a2a.TaskID
	version a2a.TaskVersion
	task    []byte // the task's JSON
	updated time.Time
}

// memTaskLimit bounds the tasks one route keeps in memory (about 2 KB
// each for a small exchange).
const memTaskLimit = 100_000

var _ a2asrv.TaskStore = (*memTasks)(nil)

func newMemTasks() *memTasks {
	return &memTasks{tasks: map[a2a.TaskID]*list.Element{}, order: list.New(), limit: memTaskLimit, keep: taskRetention, now: time.Now}
}

// Save stores task as the next version, with a2a-go's optimistic
// concurrency: prev names the version the writer read, and another
// version stored in between is a2a.ErrConcurrentTaskModification.
func (m *memTasks) Save(_ context.Context, task *a2a.Task, _ a2a.Event, _ *a2a.Task, prev a2a.TaskVersion) (a2a.TaskVersion, error) {
	b, err := taskJSON(task)
	if err != nil {
		return a2a.TaskVersionMissing, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	v := a2a.TaskVersion(1)
	if el := m.tasks[task.ID]; el != nil {
		t := el.Value.(*memTask)
		if prev != a2a.TaskVersionMissing && t.version != prev {
			return a2a.TaskVersionMissing, a2a.ErrConcurrentTaskModification
		}
		v = t.version + 1
		t.version, t.task, t.updated = v, b, now
		m.order.MoveToBack(el)
	} else {
		m.tasks[task.ID] = m.order.PushBack(&memTask{id: task.ID, version: v, task: b, updated: now})
	}
	m.forget(now)
	return v, nil
}

// forget drops the tasks past their keeping and beyond the limit,
// oldest update first. m.mu is held.
func (m *memTasks) forget(now time.Time) {
	for el := m.order.Front(); el != nil; el = m.order.Front() {
		t := el.Value.(*memTask)
		if m.order.Len() <= m.limit && now.Sub(t.updated) < m.keep {
			return
		}
		m.order.Remove(el)
		delete(m.tasks, t.id)
	}
}

// Get reads a task, or a2a.ErrTaskNotFound.
func (m *memTasks) Get(_ context.Context, id a2a.TaskID) (*a2a.Task, a2a.TaskVersion, error) {
	m.mu.Lock()
	el := m.tasks[id]
	var b []byte
	var v a2a.TaskVersion
	if el != nil {
		t := el.Value.(*memTask)
		if m.now().Sub(t.updated) < m.keep {
			b, v = t.task, t.version
		}
	}
	m.mu.Unlock()
	if b == nil {
		return nil, a2a.TaskVersionMissing, a2a.ErrTaskNotFound
	}
	task, err := taskFromJSON(id, b)
	if err != nil {
		return nil, a2a.TaskVersionMissing, err
	}
	return task, v, nil
}

// List refuses (errNoList).
func (m *memTasks) List(context.Context, *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	return nil, errNoList
}

// len is how many tasks are kept.
func (m *memTasks) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.tasks)
}
