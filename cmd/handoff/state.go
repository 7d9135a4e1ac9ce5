package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/quantumlearningmachines/handoff"
)

// fileState is the replay memory of `verify --state DIR`: the pairs live in
// DIR/replay.json, read at the start of a run under an exclusive lock on
// DIR/lock and written back atomically (temp file, fsync, rename, fsync of
// the directory) at its end, so that separate runs share one memory.
type fileState struct {
	dir  string
	lock *os.File
	mu   sync.Mutex
	rows map[[2]string]pair
	now  func() time.Time
}

type pair struct {
	Iss   string `json:"iss"`
	Hop   string `json:"hop"`
	Alg   string `json:"alg"`
	Val   string `json:"val"`
	Until int64  `json:"until"`
}

type stateFile struct {
	Version int    `json:"version"`
	Pairs   []pair `json:"pairs"`
}

func openState(dir string, now func() time.Time) (*fileState, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return nil, fmt.Errorf("state %s: lock: %w", dir, err)
	}
	s := &fileState{dir: dir, lock: lock, rows: map[[2]string]pair{}, now: now}
	b, err := os.ReadFile(filepath.Join(dir, "replay.json"))
	if err != nil && !os.IsNotExist(err) {
		s.close()
		return nil, err
	}
	if err == nil {
		var f stateFile
		if err := json.Unmarshal(b, &f); err != nil || f.Version != 1 {
			s.close()
			return nil, fmt.Errorf("state %s: replay.json is corrupt (%v); move it aside to start afresh", dir, err)
		}
		for _, p := range f.Pairs {
			if now().Unix() <= p.Until {
				s.rows[[2]string{p.Iss, p.Hop}] = p
			}
		}
	}
	return s, nil
}

func (s *fileState) Lookup(_ context.Context, iss, hop string) (handoff.Digest, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.rows[[2]string{iss, hop}]
	if !ok {
		return handoff.Digest{}, false, nil
	}
	val, err := base64.RawURLEncoding.DecodeString(p.Val)
	if err != nil {
		return handoff.Digest{}, false, fmt.Errorf("state %s: corrupt digest for hop %s", s.dir, hop)
	}
	return handoff.Digest{Alg: p.Alg, Val: val}, true, nil
}

func (s *fileState) Remember(ctx context.Context, iss, hop string, offer handoff.Element, until time.Time) (handoff.Digest, bool, error) {
	d := offer.Digest()
	if first, ok, err := s.Lookup(ctx, iss, hop); ok || err != nil {
		return first, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows[[2]string{iss, hop}] = pair{Iss: iss, Hop: hop, Alg: d.Alg, Val: d.String(), Until: until.Unix()}
	return d, true, nil
}

func (s *fileState) save() error {
	f := stateFile{Version: 1, Pairs: make([]pair, 0, len(s.rows))}
	for _, p := range s.rows {
		f.Pairs = append(f.Pairs, p)
	}
	b, err := json.Marshal(f, json.Deterministic(true))
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, "replay-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(s.dir, "replay.json")); err != nil {
		return err
	}
	d, err := os.Open(s.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (s *fileState) close() {
	_ = syscall.Flock(int(s.lock.Fd()), syscall.LOCK_UN)
	s.lock.Close()
}
