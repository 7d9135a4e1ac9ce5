package gateway

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/quantumlearningmachines/handoff/store"
)

// What replicas on one PostgreSQL store share beyond the hops, so that
// any replica can serve any request (no sticky sessions).
//
// On a PostgreSQL store the A2A routes keep their tasks in its database,
// not in the process's memory: replicas on one store then serve each other's
// tasks (tasks/get, and tasks/cancel with the delegator's signed
// "canceled", on any replica: no sticky sessions), and a restarted
// gateway still answers for the tasks it made. On SQLite (one process)
// they stay in memory (memtasks.go): each task event would be a
// transaction with an fsync, which halved the gateway's peak rate in
// scripts/bench-gateway.sh. Beside each running task, the upstream
// task behind it and the hop it carries, so that a cancel verified on
// one replica reaches the upstream task another one started.
//
// Two tables, made at start when missing:
//
//	gateway_a2a_tasks     (route, id) -> version, the task as JSON, updated
//	gateway_a2a_upstream  (route, id) -> upstream task id, iss, hop, updated
//
//	gateway_mcp_calls     (route, iss, hop) -> the forwarded tools/call's URL, session, id, protocol version
//
// The MCP routes note each tools/call they forward for a hop while it is
// open, so that a cancel verified on another replica sends the upstream
// its notifications/cancelled for that call (the session is the
// upstream's, not a replica's), and so that the caller's own unsigned
// notifications/cancelled for it (its SDK sends one when it stops
// waiting) is not passed on by another replica either: only a verified
// cancel stops taken work.
//
// A task not updated for taskRetention is swept, as is a mapping or a
// call whose task or call ended (the replica that ran it forgets it) or
// went quiet.
const taskRetention = 7 * 24 * time.Hour

// sqlTasks is one route's a2asrv.TaskStore in the store's database.
type sqlTasks struct {
	db    *sql.DB
	route string
}

var _ a2asrv.TaskStore = (*sqlTasks)(nil)

// openTasks makes the tables when missing, under a transaction-scoped
// advisory lock: replicas starting together would otherwise race in
// PostgreSQL's catalog (IF NOT EXISTS is not enough there).
func openTasks(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: the gateway's task tables: %w", err)
	}
	defer tx.Rollback()
	for _, q := range []string{
		`SELECT pg_advisory_xact_lock(hashtext('gateway_a2a_tasks'))`,
		`CREATE TABLE IF NOT EXISTS gateway_a2a_tasks (route TEXT NOT NULL, id TEXT NOT NULL, version BIGINT NOT NULL,
			task TEXT NOT NULL, updated BIGINT NOT NULL, PRIMARY KEY (route, id))`,
		`CREATE TABLE IF NOT EXISTS gateway_a2a_upstream (route TEXT NOT NULL, id TEXT NOT NULL, upstream TEXT NOT NULL,
			iss TEXT NOT NULL, hop TEXT NOT NULL, updated BIGINT NOT NULL, PRIMARY KEY (route, id))`,
		`CREATE INDEX IF NOT EXISTS gateway_a2a_upstream_hop ON gateway_a2a_upstream (route, iss, hop)`,
		`CREATE TABLE IF NOT EXISTS gateway_mcp_calls (route TEXT NOT NULL, iss TEXT NOT NULL, hop TEXT NOT NULL, url TEXT NOT NULL,
			session TEXT NOT NULL, id TEXT NOT NULL, id_key TEXT NOT NULL, proto TEXT NOT NULL, updated BIGINT NOT NULL,
			PRIMARY KEY (route, iss, hop))`,
		`CREATE INDEX IF NOT EXISTS gateway_mcp_calls_request ON gateway_mcp_calls (route, session, id_key)`,
		// The sweeper's, which runs every minute.
		`CREATE INDEX IF NOT EXISTS gateway_a2a_tasks_updated ON gateway_a2a_tasks (updated)`,
		`CREATE INDEX IF NOT EXISTS gateway_a2a_upstream_updated ON gateway_a2a_upstream (updated)`,
		`CREATE INDEX IF NOT EXISTS gateway_mcp_calls_updated ON gateway_mcp_calls (updated)`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("store: the gateway's task tables: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: the gateway's task tables: %w", err)
	}
	return nil
}

// q rewrites ? placeholders as PostgreSQL's $n.
func q(query string) string {
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Save stores task as the next version: a2a-go's optimistic concurrency
// (prev names the version the writer read; another writer's version in
// between is a2a.ErrConcurrentTaskModification), as its memory store
// does.
func (t *sqlTasks) Save(ctx context.Context, task *a2a.Task, _ a2a.Event, _ *a2a.Task, prev a2a.TaskVersion) (a2a.TaskVersion, error) {
	b, err := taskJSON(task)
	if err != nil {
		return a2a.TaskVersionMissing, err
	}
	now := time.Now().UnixMilli()
	var v int64
	if prev == a2a.TaskVersionMissing {
		err = t.db.QueryRowContext(ctx, q(`INSERT INTO gateway_a2a_tasks (route, id, version, task, updated) VALUES (?, ?, 1, ?, ?)
			ON CONFLICT (route, id) DO UPDATE SET version = gateway_a2a_tasks.version + 1, task = excluded.task, updated = excluded.updated
			RETURNING version`), t.route, string(task.ID), string(b), now).Scan(&v)
		if err != nil {
			return a2a.TaskVersionMissing, fmt.Errorf("gateway: storing task %s: %w", task.ID, err)
		}
		return a2a.TaskVersion(v), nil
	}
	err = t.db.QueryRowContext(ctx, q(`UPDATE gateway_a2a_tasks SET version = version + 1, task = ?, updated = ?
		WHERE route = ? AND id = ? AND version = ? RETURNING version`), string(b), now, t.route, string(task.ID), int64(prev)).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		// Another version is stored, or none (a task swept meanwhile is
		// stored anew, as a2a-go's memory store does).
		err = t.db.QueryRowContext(ctx, q(`INSERT INTO gateway_a2a_tasks (route, id, version, task, updated) VALUES (?, ?, 1, ?, ?)
			ON CONFLICT (route, id) DO NOTHING RETURNING version`), t.route, string(task.ID), string(b), now).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return a2a.TaskVersionMissing, a2a.ErrConcurrentTaskModification
		}
	}
	if err != nil {
		return a2a.TaskVersionMissing, fmt.Errorf("gateway: storing task %s: %w", task.ID, err)
	}
	return a2a.TaskVersion(v), nil
}

// Get reads a task, or a2a.ErrTaskNotFound.
func (t *sqlTasks) Get(ctx context.Context, id a2a.TaskID) (*a2a.Task, a2a.TaskVersion, error) {
	var b string
	var v int64
	err := t.db.QueryRowContext(ctx, q(`SELECT task, version FROM gateway_a2a_tasks WHERE route = ? AND id = ?`), t.route, string(id)).Scan(&b, &v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, a2a.TaskVersionMissing, a2a.ErrTaskNotFound
	}
	if err != nil {
		return nil, a2a.TaskVersionMissing, fmt.Errorf("gateway: reading task %s: %w", id, err)
	}
	task, err := taskFromJSON(id, []byte(b))
	if err != nil {
		return nil, a2a.TaskVersionMissing, err
	}
	return task, a2a.TaskVersion(v), nil
}

// List refuses (errNoList).
func (t *sqlTasks) List(context.Context, *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	return nil, errNoList
}

// errNoList is the task stores' answer to tasks/list, as a2a-go's memory
// store answers when it is given no way to tell callers apart: a
// gateway's tasks are every delegator's, and listing them to any caller
// would show each one the others' work.
var errNoList = fmt.Errorf("gateway: tasks/list is not offered (a task is read by its id): %w", a2a.ErrUnauthenticated)

// taskJSON is a task as the task stores keep it.
func taskJSON(task *a2a.Task) ([]byte, error) {
	if task == nil || task.ID == "" {
		return nil, errors.New("gateway: a task to store needs an id")
	}
	b, err := json.Marshal(task)
	if err != nil {
		return nil, fmt.Errorf("gateway: task %s: %w", task.ID, err)
	}
	return b, nil
}

// taskFromJSON reads a task as taskJSON made it.
func taskFromJSON(id a2a.TaskID, b []byte) (*a2a.Task, error) {
	var task a2a.Task
	if err := json.Unmarshal(b, &task); err != nil {
		return nil, fmt.Errorf("gateway: task %s as stored: %w", id, err)
	}
	return &task, nil
}

// mapUpstream notes the upstream task behind the gateway's task own,
// and the hop it carries (iss and hop empty for a task with none).
func (t *sqlTasks) mapUpstream(ctx context.Context, own, up a2a.TaskID, iss, hop string) error {
	_, err := t.db.ExecContext(ctx, q(`INSERT INTO gateway_a2a_upstream (route, id, upstream, iss, hop, updated) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (route, id) DO UPDATE SET upstream = excluded.upstream, iss = excluded.iss, hop = excluded.hop, updated = excluded.updated`),
		t.route, string(own), string(up), iss, hop, time.Now().UnixMilli())
	return err
}

// upstreamOf is the upstream task behind own ("" when none is noted).
func (t *sqlTasks) upstreamOf(ctx context.Context, own a2a.TaskID) (a2a.TaskID, error) {
	var up string
	err := t.db.QueryRowContext(ctx, q(`SELECT upstream FROM gateway_a2a_upstream WHERE route = ? AND id = ?`), t.route, string(own)).Scan(&up)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return a2a.TaskID(up), err
}

// takeHop removes and returns the mapping of the gateway task carrying
// hop (iss, hop) to its upstream task ("" when none is noted): of the
// replicas that stop the hop, one takes it.
func (t *sqlTasks) takeHop(ctx context.Context, iss, hop string) (own, up a2a.TaskID, err error) {
	var o, u string
	err = t.db.QueryRowContext(ctx, q(`DELETE FROM gateway_a2a_upstream WHERE route = ? AND iss = ? AND hop = ? AND hop <> ''
		RETURNING id, upstream`), t.route, iss, hop).Scan(&o, &u)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", nil
	}
	return a2a.TaskID(o), a2a.TaskID(u), err
}

// unmap forgets own's upstream task (the task ended).
func (t *sqlTasks) unmap(ctx context.Context, own a2a.TaskID) error {
	_, err := t.db.ExecContext(ctx, q(`DELETE FROM gateway_a2a_upstream WHERE route = ? AND id = ?`), t.route, string(own))
	return err
}

// sweepTasks removes the tasks and mappings of every route not updated
// since before.
func sweepTasks(ctx context.Context, db *sql.DB, before time.Time) error {
	for _, table := range []string{"gateway_a2a_tasks", "gateway_a2a_upstream", "gateway_mcp_calls"} {
		if _, err := db.ExecContext(ctx, q(`DELETE FROM `+table+` WHERE updated < ?`), before.UnixMilli()); err != nil {
			return fmt.Errorf("sweeping %s: %w", table, err)
		}
	}
	return nil
}

// noteCall notes a tools/call forwarded for hop c.k, open until dropCall.
func (t *sqlTasks) noteCall(ctx context.Context, c *mcpCall) error {
	_, err := t.db.ExecContext(ctx, q(`INSERT INTO gateway_mcp_calls (route, iss, hop, url, session, id, id_key, proto, updated)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (route, iss, hop) DO UPDATE SET url = excluded.url, session = excluded.session, id = excluded.id, id_key = excluded.id_key,
		proto = excluded.proto, updated = excluded.updated`),
		t.route, c.k.Iss, c.k.Hop, c.url, c.key.session, string(c.id), c.key.id, c.proto, time.Now().UnixMilli())
	return err
}

// callOpen says whether a forwarded tools/call with id key k is open on
// session, on any replica.
func (t *sqlTasks) callOpen(ctx context.Context, k callKey) (bool, error) {
	var n int
	err := t.db.QueryRowContext(ctx, q(`SELECT 1 FROM gateway_mcp_calls WHERE route = ? AND session = ? AND id_key = ? LIMIT 1`),
		t.route, k.session, k.id).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// dropCall forgets the call of hop k (it was answered, or canceled here).
func (t *sqlTasks) dropCall(ctx context.Context, k store.HopKey) error {
	_, err := t.db.ExecContext(ctx, q(`DELETE FROM gateway_mcp_calls WHERE route = ? AND iss = ? AND hop = ?`), t.route, k.Iss, k.Hop)
	return err
}

// takeCall removes and returns the open call of hop k (nil when none is
// noted): of the replicas that stop the hop, one takes it.
func (t *sqlTasks) takeCall(ctx context.Context, k store.HopKey) (*mcpCall, error) {
	c := &mcpCall{k: k}
	var id string
	err := t.db.QueryRowContext(ctx, q(`DELETE FROM gateway_mcp_calls WHERE route = ? AND iss = ? AND hop = ?
		RETURNING url, session, id, proto`), t.route, k.Iss, k.Hop).Scan(&c.url, &c.key.session, &id, &c.proto)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c.id = json.RawMessage(id)
	return c, nil
}

// sharedTasksHandler is a route's a2a-go handler on a shared store. It
// refuses a message into a task that runs (see running), and it answers
// tasks/resubscribe on a replica that does
// not run the task: a2a-go's event streams live in the memory of the
// replica running it, so here the task is read from the shared store and
// sent each time it changes (as whole Task events; read every
// followEvery, as an upstream task is followed), until it ends or
// waits for its caller, the caller goes away or the gateway closes.
type sharedTasksHandler struct {
	a2asrv.RequestHandler
	tasks *sqlTasks
	life  context.Context // ends when the gateway closes
	slots chan struct{}   // one per task followed at once: each reads the store twice a second
}

// maxFollowed bounds the tasks a route follows in the store at once,
// and followFor how long one is followed (a task left "working" by a
// crash would be followed for ever).
const (
	maxFollowed = 256
	followFor   = 10 * time.Minute
)

// running refuses a message into a task that runs (submitted or
// working): a2a-go refuses it on the replica running the task, but on
// another it would append the message to the shared task and start a
// second execution of its hop. It answers nil for a task that waits for
// its caller, has ended, or is not stored (a2a-go then decides).
func (h sharedTasksHandler) running(ctx context.Context, p *a2a.MessageSendParams) error {
	if p == nil || p.Message == nil || p.Message.TaskID == "" {
		return nil
	}
	task, _, err := h.tasks.Get(ctx, p.Message.TaskID)
	if errors.Is(err, a2a.ErrTaskNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if s := task.Status.State; s == a2a.TaskStateSubmitted || s == a2a.TaskStateWorking {
		return fmt.Errorf("gateway: task %s is %s; a message to it is taken once it waits for input: %w", task.ID, s, a2a.ErrInvalidRequest)
	}
	return nil
}

func (h sharedTasksHandler) OnSendMessage(ctx context.Context, p *a2a.MessageSendParams) (a2a.SendMessageResult, error) {
	if err := h.running(ctx, p); err != nil {
		return nil, err
	}
	return h.RequestHandler.OnSendMessage(ctx, p)
}

func (h sharedTasksHandler) OnSendMessageStream(ctx context.Context, p *a2a.MessageSendParams) iter.Seq2[a2a.Event, error] {
	if err := h.running(ctx, p); err != nil {
		return func(yield func(a2a.Event, error) bool) { yield(nil, err) }
	}
	return h.RequestHandler.OnSendMessageStream(ctx, p)
}

func (h sharedTasksHandler) OnResubscribeToTask(ctx context.Context, p *a2a.TaskIDParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		first := true
		for ev, err := range h.RequestHandler.OnResubscribeToTask(ctx, p) {
			if first && errors.Is(err, a2a.ErrTaskNotFound) && p != nil {
				break // not running here: followed in the store below
			}
			first = false
			if !yield(ev, err) {
				return
			}
		}
		if !first {
			return // the local stream, whole
		}
		select {
		case h.slots <- struct{}{}:
			defer func() { <-h.slots }()
		default:
			yield(nil, fmt.Errorf("gateway: task %s runs on another replica, and this one already follows %d tasks; read it with tasks/get: %w",
				p.ID, maxFollowed, a2a.ErrServerError))
			return
		}
		var seen a2a.TaskVersion
		until := time.Now().Add(followFor)
		for time.Now().Before(until) {
			task, v, err := h.tasks.Get(ctx, p.ID)
			if err != nil {
				yield(nil, err) // a2a.ErrTaskNotFound when no replica has it
				return
			}
			if v != seen {
				seen = v
				if !yield(task, nil) {
					return
				}
				switch s := task.Status.State; {
				case s.Terminal(), s == a2a.TaskStateInputRequired, s == a2a.TaskStateAuthRequired:
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-h.life.Done():
				return
			case <-time.After(followEvery):
			}
		}
	}
}
