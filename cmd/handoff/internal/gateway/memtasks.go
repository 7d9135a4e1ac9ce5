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
//   - It forgets ended tasks. a2a-go's store keeps every task for the life
//     of the process, so a gateway under a steady load grows without
//     bound. A task that ended (completed, failed, canceled, rejected:
//     a2a's terminal states) is dropped, least recently updated first,
//     past memEndedLimit ended tasks or memEndedBytes of their JSON, and
//     any task is dropped once not updated for taskRetention, as the
//     shared store's sweep does. A task still running or waiting for its
//     caller is never dropped for room: a2a-go answers tasks/cancel,
//     the delegator's signed cancel among them, only for a task it
//     finds, and a flood of refused messages (each an ended task) must
//     not push a running hop's task out.
type memTasks struct {
	mu    sync.Mutex
	tasks map[a2a.TaskID]*list.Element // of *memTask
	live  *list.List                   // tasks not ended, oldest update first
	ended *list.List                   // ended tasks, oldest update first
	bytes int                          // the ended tasks' JSON
	limit int                          // at most this many ended tasks
	most  int                          // and this many octets of them
	keep  time.Duration
	now   func() time.Time
}

type memTask struct {
	id      a2a.TaskID
	version a2a.TaskVersion
	task    []byte // the task's JSON
	ended   bool
	updated time.Time
}

// The bounds of one route's ended tasks (about 2 KB each for a small
// exchange).
const (
	memEndedLimit = 100_000
	memEndedBytes = 256 << 20
)

var _ a2asrv.TaskStore = (*memTasks)(nil)

func newMemTasks() *memTasks {
	return &memTasks{tasks: map[a2a.TaskID]*list.Element{}, live: list.New(), ended: list.New(),
		limit: memEndedLimit, most: memEndedBytes, keep: taskRetention, now: time.Now}
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
	t := &memTask{id: task.ID, version: 1}
	if el := m.tasks[task.ID]; el != nil {
		old := el.Value.(*memTask)
		if prev != a2a.TaskVersionMissing && old.version != prev {
			return a2a.TaskVersionMissing, a2a.ErrConcurrentTaskModification
		}
		t.version = old.version + 1
		m.drop(el)
	}
	t.task, t.ended, t.updated = b, task.Status.State.Terminal(), now
	if t.ended {
		m.tasks[t.id] = m.ended.PushBack(t)
		m.bytes += len(b)
	} else {
		m.tasks[t.id] = m.live.PushBack(t)
	}
	m.forget(now)
	return t.version, nil
}

// drop removes a task. m.mu is held.
func (m *memTasks) drop(el *list.Element) {
	t := el.Value.(*memTask)
	if t.ended {
		m.ended.Remove(el)
		m.bytes -= len(t.task)
	} else {
		m.live.Remove(el)
	}
	delete(m.tasks, t.id)
}

// forget drops the tasks past their keeping, and the ended tasks beyond
// the bounds, oldest update first. m.mu is held.
func (m *memTasks) forget(now time.Time) {
	for el := m.live.Front(); el != nil && now.Sub(el.Value.(*memTask).updated) >= m.keep; el = m.live.Front() {
		m.drop(el)
	}
	for el := m.ended.Front(); el != nil; el = m.ended.Front() {
		if m.ended.Len() <= m.limit && m.bytes <= m.most && now.Sub(el.Value.(*memTask).updated) < m.keep {
			return
		}
		m.drop(el)
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
