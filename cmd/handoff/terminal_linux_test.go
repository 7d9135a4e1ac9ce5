package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// openTerminal opens a pseudo-terminal and returns its terminal end.
func openTerminal(t *testing.T) *os.File {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlocking the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Skipf("naming the pseudo-terminal: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("opening the pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Binary output to a terminal is refused (issue 15, as age does): a CBOR
// Handoff or raw COSE octets would draw on the screen. Redirected to a
// file, the same commands write them.
func TestBinaryNotToTerminal(t *testing.T) {
	tty := openTerminal(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "k.jwk")
	h := filepath.Join(dir, "h.json")
	quiet := env{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	if code := run([]string{"keygen", "--out", key}, quiet); code != 0 {
		t.Fatal("keygen failed")
	}
	offer := []string{"offer", "--key", key, "--iss", "https://p.example", "--aud", "https://p.example", "--dialog", "d"}
	var out bytes.Buffer
	if code := run(offer, env{stdout: &out, stderr: &bytes.Buffer{}}); code != 0 {
		t.Fatal("offer failed")
	}
	if err := os.WriteFile(h, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		append(offer, "--cbor"),
		{"status", "--key", key, "--from", h, "--state", "accepted", "--cose", "--cbor"},
	} {
		var stderr bytes.Buffer
		if code := run(args, env{stdout: tty, stderr: &stderr}); code != 2 || !strings.Contains(stderr.String(), "refusing to write") {
			t.Errorf("%s to a terminal: exit %d, %q; want 2 and a refusal", strings.Join(args, " "), code, stderr.String())
		}
		f, err := os.Create(filepath.Join(dir, "out"))
		if err != nil {
			t.Fatal(err)
		}
		if code := run(args, env{stdout: f, stderr: &stderr}); code != 0 {
			t.Errorf("%s to a file: exit %d, %q", strings.Join(args, " "), code, stderr.String())
		}
		f.Close()
	}
}
