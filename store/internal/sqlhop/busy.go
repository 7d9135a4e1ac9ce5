package sqlhop

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Retrying a busy SQLite write. The SQLite DSN sets a busy timeout (10 s),
// inside which the driver waits for the write lock itself; a write still
// refused with SQLITE_BUSY or SQLITE_LOCKED ("database is locked") wrote
// nothing, so it is safe to make again. retryBusy makes it again, with
// backoff, for as long as the caller's context allows (or, when the
// context has no deadline, for busyNoDeadline more), rather than fail an
// offer because another writer (another process sharing the file, a long
// transaction of the application's own) held the lock a while.

const (
	busyFirst      = 5 * time.Millisecond
	busyMaxWait    = 250 * time.Millisecond
	busyNoDeadline = 30 * time.Second
)

// isBusy reports whether err is SQLite's "the database is locked".
func isBusy(d Dialect, err error) bool {
	if err == nil || d.Name != "sqlite" {
		return false
	}
	var c interface{ Code() int }
	if errors.As(err, &c) {
		switch c.Code() & 0xff { // the primary code of an extended one
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
		return false
	}
	return strings.Contains(err.Error(), "database is locked")
}

// retryBusy runs op until it returns something other than a busy error,
// or ctx (or the bound above) ends; then it returns op's last error with
// why it stopped retrying.
func retryBusy(ctx context.Context, d Dialect, op func() error) error {
	err := op()
	if !isBusy(d, err) {
		return err
	}
	end, ok := ctx.Deadline()
	if !ok {
		end = time.Now().Add(busyNoDeadline)
	}
	wait := busyFirst
	for tries := 1; ; tries++ {
		left := time.Until(end)
		if left <= 0 {
			return fmt.Errorf("%w (still locked after %d attempts, at the deadline)", err, tries)
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (still locked after %d attempts: %w)", err, tries, ctx.Err())
		case <-t.C:
		}
		if err = op(); !isBusy(d, err) {
			return err
		}
		wait = min(2*wait, busyMaxWait)
	}
}
