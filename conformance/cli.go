package conformance

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CLIDriver drives a binary that implements SPEC.md section 4 (`verify`,
// `verify-status`, `offer`, `status`), for implementations without a
// driver of the protocol: each case becomes files in a temporary folder
// and one run of the binary per delivery or signing. Inputs that section 4
// has no flag for (a replay memory's start, trusted origins, step 7's
// policy and octets) make the case not tested. The exit code must agree
// with the verdict: 0 for accepted or verified, 1 otherwise.
type CLIDriver struct {
	Path    string
	Timeout time.Duration // per run of the binary
	root    string        // private (0700); each case gets a folder of its own in it
	n       int
	dir     string // this case's folder
}

// NewCLIDriver checks that path runs and makes the working folder.
func NewCLIDriver(path string, timeout time.Duration) (*CLIDriver, error) {
	abs, err := exec.LookPath(path)
	if err != nil {
		return nil, fmt.Errorf("--cli %s: %w", path, err)
	}
	root, err := os.MkdirTemp("", "handoff-conformance-")
	if err != nil {
		return nil, err
	}
	return &CLIDriver{Path: abs, Timeout: timeout, root: root}, nil
}

// Close removes the working folder.
func (d *CLIDriver) Close() error { return os.RemoveAll(d.root) }

// run runs the binary and returns its stdout and exit code (0 or 1); a
// usage or I/O error (exit 2, or any other) is returned with its stderr.
func (d *CLIDriver) run(ctx context.Context, args ...string) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.Path, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.Bytes(), 0, nil
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return out.Bytes(), 1, nil
	case ctx.Err() != nil:
		return nil, 0, fmt.Errorf("%s %s: no answer within %s", filepath.Base(d.Path), args[0], d.Timeout)
	}
	return nil, 0, fmt.Errorf("%s %s: %v: %s", filepath.Base(d.Path), args[0], err, oneLine(errb.String()))
}

// exitAgrees checks section 4's exit code against the verdict printed.
func exitAgrees(code int, positive bool) error {
	if want := map[bool]int{true: 0, false: 1}[positive]; code != want {
		return fmt.Errorf("exit %d with that verdict, want %d (SPEC.md section 4)", code, want)
	}
	return nil
}

func (d *CLIDriver) file(name string, hexOrRaw any) (string, error) {
	p := filepath.Join(d.dir, name)
	var b []byte
	switch v := hexOrRaw.(type) {
	case string:
		var err error
		if b, err = hex.DecodeString(v); err != nil {
			return "", err
		}
	case []byte:
		b = v
	case json.RawMessage:
		b = v
	}
	return p, os.WriteFile(p, b, 0o600)
}

// Do runs one case. A run that fails (exit 2, a timeout, output that is
// not the section 4 line) fails the case, not the harness.
func (d *CLIDriver) Do(ctx context.Context, req *Request) (*Answer, error) {
	d.n++
	d.dir = filepath.Join(d.root, strconv.Itoa(d.n))
	if err := os.Mkdir(d.dir, 0o700); err != nil {
		return nil, err
	}
	defer os.RemoveAll(d.dir)
	trustFile, err := d.file("trust.json", req.Trust)
	if err != nil {
		return nil, err
	}
	var a *Answer
	switch req.Kind {
	case KindVerify:
		a, err = d.verify(ctx, req, trustFile)
	case KindVerifyStatus:
		a, err = d.verifyStatus(ctx, req, trustFile)
	case KindSignOffer, KindSignStatus:
		a, err = d.sign(ctx, req)
	default:
		a = &Answer{Skip: "unknown kind " + req.Kind}
	}
	if err != nil {
		// The implementation's failure to answer is its verdict here.
		return &Answer{ID: req.ID, Error: err.Error()}, nil
	}
	a.ID = req.ID
	return a, nil
}

func (d *CLIDriver) verify(ctx context.Context, req *Request, trustFile string) (*Answer, error) {
	o := req.Options
	if o == nil {
		o = &VerifyOptions{}
	}
	switch {
	case o.MemorySince != 0:
		return &Answer{Skip: "SPEC.md section 4 has no flag for a replay memory's start (memorySince)"}, nil
	case len(o.Origins) > 0:
		return &Answer{Skip: "SPEC.md section 4 has no flag for the origins trusted to start a chain (origins)"}, nil
	case o.RequireRefs || len(o.RefOctets) > 0 || len(o.RefSalts) > 0:
		return &Answer{Skip: "SPEC.md section 4 has no flags for step 7's policy and octets (requireRefs, refOctets)"}, nil
	}
	args := []string{"verify", "--trust", trustFile, "--me", req.Me}
	if len(req.Deliveries) > 1 {
		// One replay memory for the case's deliveries, each judged at its
		// own time: section 4's --state.
		args = append(args, "--state", filepath.Join(d.dir, "state"))
	}
	if o.Skew != nil {
		args = append(args, "--skew", strconv.FormatInt(*o.Skew, 10))
	}
	if o.MaxLifetime != nil {
		args = append(args, "--max-lifetime", strconv.FormatInt(*o.MaxLifetime, 10))
	}
	if o.MaxChain != 0 {
		args = append(args, "--max-chain", strconv.Itoa(o.MaxChain))
	}
	if o.RequireFullChain {
		args = append(args, "--require-full-chain")
	}
	a := &Answer{}
	for i, dl := range req.Deliveries {
		p, err := d.file(fmt.Sprintf("delivery-%d", i), dl.Handoff)
		if err != nil {
			return nil, err
		}
		run := append(append([]string(nil), args...), "--now", strconv.FormatInt(dl.Now, 10))
		if dl.Dialog != "" {
			run = append(run, "--dialog", dl.Dialog)
		}
		out, code, err := d.run(ctx, append(run, p)...)
		if err != nil {
			return nil, fmt.Errorf("delivery %d: %w", i+1, err)
		}
		var v struct {
			Verdict
			File string          `json:"file"`
			Refs json.RawMessage `json:"refs"`
		}
		if err := strictJSON(bytes.TrimSpace(out), &v); err != nil {
			return nil, fmt.Errorf("delivery %d: not one verify line: %w: %.200q", i+1, err, out)
		}
		if err := exitAgrees(code, v.Result == "accepted"); err != nil {
			return nil, fmt.Errorf("delivery %d: %w", i+1, err)
		}
		a.Deliveries = append(a.Deliveries, v.Verdict)
	}
	return a, nil
}

func (d *CLIDriver) verifyStatus(ctx context.Context, req *Request, trustFile string) (*Answer, error) {
	from, err := d.file("from", req.From)
	if err != nil {
		return nil, err
	}
	st, err := d.file("status", req.Status)
	if err != nil {
		return nil, err
	}
	out, code, err := d.run(ctx, "verify-status", "--trust", trustFile, "--from", from, "--now", strconv.FormatInt(req.Now, 10), st)
	if err != nil {
		return nil, err
	}
	var v struct {
		File   string `json:"file"`
		Result string `json:"result"`
		State  string `json:"state"`
		Reason string `json:"reason"`
		Error  string `json:"error"`
	}
	if err := strictJSON(bytes.TrimSpace(out), &v); err != nil {
		return nil, fmt.Errorf("not one verify-status line: %w: %.200q", err, out)
	}
	if err := exitAgrees(code, v.Result == "verified"); err != nil {
		return nil, err
	}
	return &Answer{Result: v.Result, State: v.State}, nil
}

func (d *CLIDriver) sign(ctx context.Context, req *Request) (*Answer, error) {
	s := req.Sign
	key, err := d.file("key.jwk", s.Key)
	if err != nil {
		return nil, err
	}
	args := []string{"offer", "--key", key, "--iss", s.Iss, "--aud", s.Aud, "--dialog", s.Dialog,
		"--ttl", strconv.FormatInt(s.TTL, 10)}
	if req.Kind == KindSignStatus {
		args = []string{"status", "--key", key, "--state", s.State}
		if s.Reason != "" {
			args = append(args, "--reason", s.Reason)
		}
		if s.Detail != "" {
			args = append(args, "--detail", s.Detail)
		}
		if s.Iss != "" {
			args = append(args, "--iss", s.Iss)
		}
	}
	args = append(args, "--now", strconv.FormatInt(req.Now, 10))
	if req.From != "" {
		from, err := d.file("from", req.From)
		if err != nil {
			return nil, err
		}
		args = append(args, "--from", from)
	}
	if s.Form == "cose" {
		args = append(args, "--cose")
	}
	if s.CBOR {
		args = append(args, "--cbor")
	}
	out, code, err := d.run(ctx, args...)
	if err != nil {
		return nil, err
	}
	if err := exitAgrees(code, true); err != nil {
		return nil, err
	}
	if req.Kind == KindSignStatus && !s.CBOR {
		out = []byte(strings.TrimRight(string(out), "\r\n"))
	}
	return &Answer{Output: hex.EncodeToString(out)}, nil
}
