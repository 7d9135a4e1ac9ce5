package gateway

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// Links tie the agent's outbound calls (egress.go) to the inbound hop
// whose work they do, so that the offer the gateway signs for an
// outbound call passes the inbound one on: prev is its digest and the
// chain carries it, octets unchanged.
//
// When the gateway forwards an inbound hop's work to its agent, it
// notes the hop here under three names, and an outbound call is linked
// by the first it carries, in this order (issue 17):
//
//  1. the LinkHeader the gateway added to the forwarded request, which
//     an agent that can passes back on its outbound calls;
//  2. the W3C trace id of the forwarded request (its traceparent):
//     instrumented agent frameworks propagate it to the calls they make
//     while doing the work;
//  3. the A2A contextId of the message forwarded, reused by an agent that
//     carries the conversation on to the next agent.
//
// The trace id and the contextId are chosen by the caller who sent the
// inbound hop, so they are names a caller could give another caller's
// hop: a trace or a conversation that two live inbound hops of
// different offers carried names neither (ambiguous), and a call
// linked only by it is unlinked, never linked to the wrong work. The
// token is the gateway's own secret, given only to the agent.
//
// A link lasts as long as the inbound offer can still be passed on: to
// its exp plus the skew (a later offer whose iat is past that breaks the
// chain, draft "Chain"); a stopped hop's link stays, marked (stop). The
// links are this process's: with replicas, an agent calls out through
// the gateway that forwarded it the work. They are bounded (maxLinks
// hops, maxLinkBytes of Handoffs; the expired dropped first, then the
// oldest): a dropped link makes the next call unlinked, which is
// counted, logged and flagged, never mislinked.
const LinkHeader = "Handoff-Link"

const (
	maxLinks     = 1 << 16
	maxLinkBytes = 256 << 20
)

// ambiguous files a name that two live hops carried.
var ambiguous = &inboundLink{}

// inboundLink is an inbound hop as an outbound call is linked to it.
type inboundLink struct {
	key            store.HopKey
	h              *handoff.Handoff // as received: its offer and chain are passed on
	token          string
	until          time.Time
	size           int    // the Handoff's octets
	stopped        bool   // the hop was stopped: a call linked to it gets no offer (under links.mu)
	trace, context string // its other names in links.by ("" for none)
	task           string // "task:" and the upstream's task id doing its work (A2A)
}

type links struct {
	mu     sync.Mutex
	byHop  map[store.HopKey]*inboundLink
	by     map[string]*inboundLink // the token, "trace:<id>", "context:<id>"
	carry  map[string]int          // how many live hops carry each trace and context name
	order  []store.HopKey          // byHop's keys, oldest first (some may be gone)
	bytes  int                     // the Handoffs' octets held
	pruned time.Time               // the last sweep of the expired
	now    func() time.Time
}

func newLinks() *links {
	return &links{byHop: map[store.HopKey]*inboundLink{}, by: map[string]*inboundLink{}, carry: map[string]int{}, now: time.Now}
}

// note records the inbound hop h (iss, hop) whose work is being
// forwarded, with the trace id and A2A contextId of the forwarded
// request ("" for none), and returns the token to send as LinkHeader.
// skew is the policy's.
func (l *links) note(iss, hop string, h *handoff.Handoff, traceID, contextID string, skew time.Duration) string {
	if l == nil || h == nil {
		return ""
	}
	o, _, err := handoff.UnsafeDecode(h.Offer)
	if err != nil || o == nil {
		return ""
	}
	until := time.Unix(o.Exp, 0).Add(skew)
	size := len(h.Offer.Octets)
	for _, el := range h.Chain {
		size += len(el.Octets)
	}
	k := store.HopKey{Iss: iss, Hop: hop}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if !now.Before(until) {
		return "" // nothing could be passed on any more
	}
	if now.Sub(l.pruned) > time.Minute {
		l.prune(now, 0, 0)
	}
	e := l.byHop[k]
	if e == nil {
		if len(l.byHop) >= maxLinks || l.bytes+size > maxLinkBytes {
			l.prune(now, 1, size)
		}
		e = &inboundLink{key: k, h: h, token: newToken(), until: until, size: size}
		l.byHop[k] = e
		l.bytes += size
		l.order = append(l.order, k)
		l.by[e.token] = e
	}
	l.rename(e, &e.trace, "trace:", traceID)
	l.rename(e, &e.context, "context:", contextID)
	return e.token
}

// noteTask names the inbound hop (iss, hop) also by the upstream's task
// id that does its work (A2A): an agent that refers to its own task in
// an outbound message's referenceTaskIds is linked by it.
func (l *links) noteTask(iss, hop string, h *handoff.Handoff, taskID string, skew time.Duration) {
	if l == nil || taskID == "" || l.note(iss, hop, h, "", "", skew) == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.byHop[store.HopKey{Iss: iss, Hop: hop}]; e != nil {
		l.rename(e, &e.task, "task:", taskID)
	}
}

// rename files e under prefix+id in place of its earlier name of that
// kind. A name that another live hop carries too is ambiguous: it
// names neither, until every hop that carried it is gone.
func (l *links) rename(e *inboundLink, cur *string, prefix, id string) {
	if id == "" || *cur == prefix+id {
		return
	}
	l.unname(e, *cur)
	n := prefix + id
	*cur = n
	l.carry[n]++
	if l.carry[n] == 1 {
		l.by[n] = e
	} else {
		l.by[n] = ambiguous
	}
}

// unname drops e's name n.
func (l *links) unname(e *inboundLink, n string) {
	if n == "" {
		return
	}
	l.carry[n]--
	if l.carry[n] <= 0 {
		delete(l.carry, n)
		delete(l.by, n)
	}
}

// prune drops the links past their time, then the oldest until room is
// left for more hops and bytes. Called with mu held.
func (l *links) prune(now time.Time, hops, bytes int) {
	l.pruned = now
	keep := l.order[:0]
	for _, k := range l.order {
		e := l.byHop[k]
		switch {
		case e == nil:
		case !now.Before(e.until) || len(l.byHop)+hops > maxLinks || l.bytes+bytes > maxLinkBytes:
			l.drop(e)
		default:
			keep = append(keep, k)
		}
	}
	clear(l.order[len(keep):])
	l.order = keep
}

func (l *links) drop(e *inboundLink) {
	delete(l.byHop, e.key)
	l.bytes -= e.size
	delete(l.by, e.token)
	l.unname(e, e.trace)
	l.unname(e, e.context)
	l.unname(e, e.task)
}

// stop marks the link of a stopped hop (canceled, or its offer
// equivocated): a call linked to its work is refused, not signed as a
// new chain. The mark lasts as long as the link would have.
func (l *links) stop(iss, hop string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.byHop[store.HopKey{Iss: iss, Hop: hop}]; e != nil {
		e.stopped = true
	}
}

// isStopped reads e's mark.
func (l *links) isStopped(e *inboundLink) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return e.stopped
}

// forget drops the link of (iss, hop).
func (l *links) forget(iss, hop string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.byHop[store.HopKey{Iss: iss, Hop: hop}]; e != nil {
		l.drop(e)
	}
}

// How an outbound call was linked.
const (
	linkedByHeader  = "header"
	linkedByTrace   = "trace"
	linkedByContext = "context"
	unlinked        = "unlinked"
)

// find links an outbound request (its headers, and the A2A contextId of
// its message, "" for none) to an inbound hop: nil and unlinked when
// none of its names is known and live. why says what was tried.
func (l *links) find(h http.Header, contextID string, refTasks ...string) (e *inboundLink, how, why string) {
	if l == nil {
		return nil, unlinked, "no inbound hop is forwarded by this gateway"
	}
	var tried []string
	try := func(name, how string) *inboundLink {
		l.mu.Lock()
		e := l.by[name]
		l.mu.Unlock()
		switch {
		case e == nil:
			tried = append(tried, "its "+how+" names no inbound hop forwarded here")
		case e == ambiguous:
			tried = append(tried, "its "+how+" names more than one inbound hop forwarded here (ambiguous: another caller may have chosen it)")
			return nil
		case !l.now().Before(e.until):
			tried = append(tried, "its "+how+" names an inbound hop ("+e.key.Hop+") whose offer can no longer be passed on (expired)")
			return nil
		}
		return e
	}
	if t := h.Get(LinkHeader); t != "" {
		// The header decides alone: a token the gateway no longer holds
		// (expired, evicted) leaves the call unlinked, never linked by
		// a trace or contextId that another hop may carry now.
		if e := try(t, linkedByHeader); e != nil {
			return e, linkedByHeader, ""
		}
		return nil, unlinked, strings.Join(tried, "; ")
	}
	if id := traceID(h); id != "" {
		if e := try("trace:"+id, linkedByTrace); e != nil {
			return e, linkedByTrace, ""
		}
	}
	if contextID != "" {
		if e := try("context:"+contextID, linkedByContext); e != nil {
			return e, linkedByContext, ""
		}
	}
	for _, t := range refTasks {
		if e := try("task:"+t, linkedByContext); e != nil {
			return e, linkedByContext, ""
		}
	}
	if len(tried) == 0 {
		return nil, unlinked, "it carries no " + LinkHeader + " header, no traceparent, no contextId and no referenceTaskIds"
	}
	return nil, unlinked, strings.Join(tried, "; ")
}

// traceID is the trace id of a valid W3C traceparent header ("" for
// none): version 00's four fields, lowercase hex, the id not all zero.
func traceID(h http.Header) string {
	v := h.Get("Traceparent")
	parts := strings.Split(v, "-")
	if len(parts) < 4 || len(parts[0]) != 2 || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 ||
		parts[0] == "ff" || parts[0] == "00" && len(parts) != 4 {
		return ""
	}
	for _, p := range parts[:4] {
		for _, c := range p {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return ""
			}
		}
	}
	if strings.Trim(parts[1], "0") == "" || strings.Trim(parts[2], "0") == "" {
		return ""
	}
	return parts[1]
}

func newToken() string {
	var b [18]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
