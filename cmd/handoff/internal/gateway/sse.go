package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"time"
)

// writeAllowance is how long one write of n octets to a caller may
// take: 5 s, and one more for each 64 KiB (a caller reading slower than
// that, or not at all, is taken for gone).
func writeAllowance(n int) time.Duration {
	return 5*time.Second + time.Duration(n)*time.Second/(64<<10)
}

// sseReader reads server-sent events as the WHATWG event stream format
// defines them: lines end in CRLF, LF or a lone CR, a leading byte-order
// mark is dropped, and a blank line ends an event. Reading them as a
// spec-following client does matters: a lone CR the gateway took for
// part of a line, a client would take for a line end, and the two would
// see different events.
type sseReader struct {
	br     *bufio.Reader
	skipLF bool // the last line ended in CR: an LF right after belongs to it
	begun  bool
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// sseEvent is one server-sent event as read: its lines (without their
// ends, the blank line that ended it left out) and its data.
type sseEvent struct {
	lines [][]byte
	data  []byte
}

// next reads one event, up to a blank line or the stream's end (then
// with the error: io.EOF, or why it broke). A blank line alone is an
// event of no lines. An event over maxMCPMessage is an error.
func (r *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	var data [][]byte
	size := 0
	for {
		line, err := r.line(maxMCPMessage - size)
		if err != nil && len(line) == 0 {
			ev.data = bytes.Join(data, []byte("\n"))
			return ev, err
		}
		if len(line) == 0 {
			ev.data = bytes.Join(data, []byte("\n"))
			return ev, nil
		}
		size += len(line) + 1
		ev.lines = append(ev.lines, line)
		if d, ok := bytes.CutPrefix(line, []byte("data")); ok && (len(d) == 0 || d[0] == ':') {
			d = bytes.TrimPrefix(bytes.TrimPrefix(d, []byte(":")), []byte(" "))
			data = append(data, d)
		}
		if err != nil {
			ev.data = bytes.Join(data, []byte("\n"))
			return ev, err
		}
	}
}

// line reads one line without its end; at the stream's end, the line so
// far with the error.
func (r *sseReader) line(limit int) ([]byte, error) {
	var line []byte
	for {
		if _, err := r.br.Peek(1); err != nil {
			return line, err
		}
		b, _ := r.br.Peek(r.br.Buffered())
		if !r.begun {
			r.begun = true
			if bytes.HasPrefix(b, []byte("\xef\xbb\xbf")) {
				r.br.Discard(3)
				continue
			}
		}
		if r.skipLF {
			r.skipLF = false
			if b[0] == '\n' {
				r.br.Discard(1)
				continue
			}
		}
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			if len(line)+len(b) > limit {
				return nil, fmt.Errorf("a server-sent event over %d bytes", maxMCPMessage)
			}
			line = append(line, b...)
			r.br.Discard(len(b))
			continue
		}
		if len(line)+i > limit {
			return nil, fmt.Errorf("a server-sent event over %d bytes", maxMCPMessage)
		}
		line = append(line, b[:i]...)
		r.skipLF = b[i] == '\r'
		r.br.Discard(i + 1)
		if line == nil {
			line = []byte{}
		}
		return line, nil
	}
}

// bytes is the event as the gateway passes it on: its lines, each
// ending in LF, and the blank line that ends it.
func (ev sseEvent) bytes() []byte {
	var out []byte
	for _, l := range ev.lines {
		out = append(append(out, l...), '\n')
	}
	return append(out, '\n')
}

// response is the event's JSON-RPC response to the request id, if it
// holds one.
func (ev sseEvent) response(id string) (rpcMessage, bool) {
	if len(ev.data) == 0 {
		return rpcMessage{}, false
	}
	r, _, err := readRPC(ev.data)
	if key, ok := idKey(r.ID); err != nil || !ok || key != id || r.Method != "" || r.Result == nil && r.Error == nil {
		return rpcMessage{}, false
	}
	return r, true
}

// with is the event with its data replaced by msg (one data line; the
// other fields, such as its id for Last-Event-ID, as they were).
func (ev sseEvent) with(msg []byte) []byte {
	var out []byte
	for _, l := range ev.lines {
		if d, ok := bytes.CutPrefix(l, []byte("data")); ok && (len(d) == 0 || d[0] == ':') {
			continue
		}
		out = append(append(out, l...), '\n')
	}
	out = append(out, "data: "...)
	out = append(out, msg...)
	return append(out, "\n\n"...)
}
