//go:build unix

package conformance

import (
	"os/exec"
	"syscall"
)

// ownGroup puts the driver in a process group of its own, so that
// killGroup stops its children too (a shell's pipeline, a sleeping child).
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
