//go:build unix

package main

import (
	"os"
	"syscall"
)

// lockDir holds an exclusive lock on the folder dir until unlock is
// called, so that two "trust add" runs on one trust file take turns at
// reading and replacing it instead of each writing its own key over the
// other's. The folder, not the file, is locked: the file is replaced by
// a rename, and a lock on it would stay with the old one.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil // closing releases the lock
}
