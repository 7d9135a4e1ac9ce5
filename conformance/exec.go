package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"time"
)

// ExecDriver runs a driver program (`sh -c Command`) for the whole run,
// speaking the driver protocol on its stdin and stdout; its stderr goes
// to Stderr.
type ExecDriver struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	lines   chan []byte
	readErr chan error
	exited  chan struct{} // closed once the driver exited; waitErr is then set
	waitErr error
	timeout time.Duration
}

// StartExec starts command. Each answer must come within timeout.
func StartExec(command string, env []string, stderr io.Writer, timeout time.Duration) (*ExecDriver, error) {
	cmd := exec.Command("sh", "-c", command)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = stderr
	// A killed driver's children may hold its stderr open: Wait gives up
	// on them after this.
	cmd.WaitDelay = 2 * time.Second
	ownGroup(cmd)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the driver %q: %w", command, err)
	}
	d := &ExecDriver{cmd: cmd, in: in, lines: make(chan []byte, 16), readErr: make(chan error, 1), exited: make(chan struct{}), timeout: timeout}
	go func() {
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 0, 1<<20), maxRequestLine)
		for sc.Scan() {
			d.lines <- slices.Clone(sc.Bytes())
		}
		err := sc.Err()
		if err == nil {
			err = io.EOF
		}
		d.readErr <- err
		close(d.lines)
	}()
	return d, nil
}

// Do sends req and reads its answer.
func (d *ExecDriver) Do(ctx context.Context, req *Request) (*Answer, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	// The timeout covers writing the request too: a driver that does not
	// read blocks a write larger than the pipe's buffer.
	t := time.NewTimer(d.timeout)
	defer t.Stop()
	wrote := make(chan error, 1)
	go func() {
		_, err := d.in.Write(append(b, '\n'))
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if err != nil {
			return nil, fmt.Errorf("the driver does not read its input (did it exit?): %w", err)
		}
	case <-t.C:
		killGroup(d.cmd)
		return nil, fmt.Errorf("the driver read no request within %s", d.timeout)
	case <-ctx.Done():
		killGroup(d.cmd)
		return nil, ctx.Err()
	}
	select {
	case line, ok := <-d.lines:
		if !ok {
			err := <-d.readErr
			select { // say how the driver ended, if it did
			case <-d.exited:
				if d.waitErr != nil {
					err = d.waitErr
				} else {
					err = errors.New("it exited with status 0")
				}
			case <-time.After(time.Second):
			}
			return nil, fmt.Errorf("the driver closed its output without answering (%v)", err)
		}
		return parseAnswer(line)
	case <-t.C:
		killGroup(d.cmd) // it is out of step with the cases now
		return nil, fmt.Errorf("the driver gave no answer within %s", d.timeout)
	case <-ctx.Done():
		killGroup(d.cmd)
		return nil, ctx.Err()
	}
}

// parseAnswer reads one answer line. A line that is not a JSON object
// with an id is the driver's fault (the run stops); an answer with a
// member the protocol does not have fails its case.
func parseAnswer(line []byte) (*Answer, error) {
	var a Answer
	if err := json.Unmarshal(line, &a); err != nil {
		return nil, fmt.Errorf("the driver's answer is not an answer line (a JSON object with an id): %v: %.200q", err, line)
	}
	if a.ID == "" {
		return nil, fmt.Errorf("the driver's answer has no id: %.200q", line)
	}
	if err := strictJSON(line, &Answer{}); err != nil {
		return &Answer{ID: a.ID, misfit: "the answer does not fit the driver protocol: " + err.Error()}, nil
	}
	return &a, nil
}

// Close ends the driver's input and waits for it to exit (killing it
// after a grace period).
func (d *ExecDriver) Close() error {
	d.in.Close()
	select {
	case <-d.exited:
		if d.waitErr != nil {
			return fmt.Errorf("the driver: %w", d.waitErr)
		}
		return nil
	case <-time.After(10 * time.Second):
		killGroup(d.cmd)
		<-d.exited
		return errors.New("the driver did not exit within 10 s of its input's end")
	}
}
