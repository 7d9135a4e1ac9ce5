package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/picture"
	"github.com/quantumlearningmachines/handoff/trust"
)

func cmdInspect(e env, args []string) error {
	fs := newFlags("inspect", e)
	trustFile := fs.String("trust", "", "a trust file: judge the Handoff as its audience would, and show which key verified each element")
	me := fs.String("me", "", "the receiver `ID` to judge it as (default: the offer's aud)")
	var now unixFlag
	fs.Var(&now, "now", "the current time, `UNIX` seconds (default: the clock)")
	asJSON := fs.Bool("json", false, "print what inspect shows as one JSON object, for tools")
	svgFile := fs.String("svg", "", "also write the chain picture to `FILE` as SVG, the picture a web page shows (a Handoff only)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one FILE")
	}
	if *svgFile == "-" {
		return usagef("--svg takes a file name (the text picture goes to standard output)")
	}
	if *svgFile != "" {
		// Never write the picture over the file inspected.
		if a, err := os.Stat(pos[0]); err == nil {
			if b, err := os.Stat(*svgFile); err == nil && os.SameFile(a, b) {
				return usagef("--svg %s would overwrite the file inspected", *svgFile)
			}
		}
	}
	b, err := readBounded(pos[0], handoff.DefaultLimits().MaxHandoff)
	if err != nil {
		return err
	}
	var keys *trust.Config
	if *trustFile != "" {
		if keys, err = loadTrust(*trustFile); err != nil {
			return err
		}
	}
	w := e.stdout
	if !handoff.IsJSON(b) && !isCBORMap(b) {
		// A signed element on its own: a status (or offer) as JWS text,
		// base64url COSE text, or raw COSE_Sign1 octets.
		el := handoff.ParseElement(b)
		if el.Form == handoff.FormInvalid {
			return fmt.Errorf("%s is neither a Handoff nor a signed element", pos[0])
		}
		if *svgFile != "" {
			return usagef("--svg draws a Handoff's chain; %s is a single signed element", pos[0])
		}
		// A status (or offer) alone: its row says its form and size.
		inspectElement(w, "Signed element:", el, keys)
		return nil
	}
	enc := "JSON"
	if !handoff.IsJSON(b) {
		enc = "CBOR"
	}
	h, err := handoff.ParseHandoff(b, handoff.Limits{})
	if err != nil {
		return fmt.Errorf("%s: %w", pos[0], err)
	}
	v := judge(b, h, keys, *me, now.now)
	if *svgFile != "" {
		if err := writeSVG(*svgFile, picture.Of(h, keys, now.now())); err != nil {
			return err
		}
	}
	if *asJSON {
		return inspectJSON(e, h, enc, keys, v, now.now())
	}
	printVerdict(w, v)
	return inspectHandoff(w, h, enc, keys, now.now())
}

// writeSVG writes the chain picture to path.
func writeSVG(path string, c picture.Chain) error {
	var b bytes.Buffer
	if err := c.SVG(&b); err != nil {
		return err
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--svg: %w", err)
	}
	return nil
}

// isCBORMap reports whether b starts with a CBOR map head (major type 5),
// as every CBOR Handoff does.
func isCBORMap(b []byte) bool { return len(b) > 0 && b[0]>>5 == 5 }

func inspectHandoff(w io.Writer, h *handoff.Handoff, enc string, keys *trust.Config, now time.Time) error {
	fmt.Fprintf(w, "Handoff (%s): an offer with a chain of %d\n\n", enc, len(h.Chain))
	for i, el := range h.Chain {
		inspectElement(w, fmt.Sprintf("chain[%d]", i), el, keys)
	}
	inspectElement(w, "offer", h.Offer, keys)
	for _, k := range sortedKeys(h.Extra) {
		fmt.Fprintf(w, "unknown Handoff member %s (kept, not signed)\n\n", safeText(strconv.Quote(k)))
	}
	drawChain(w, picture.Of(h, keys, now))
	return nil
}

// inspectElement prints one element.
func inspectElement(w io.Writer, label string, el handoff.Element, keys *trust.Config) {
	d := el.Digest()
	fmt.Fprintf(w, "%s  %s, %d octets\n", label, el.Form, len(el.Octets))
	// Each row is one line whatever the element holds: its value is
	// escaped as a whole (decision 52), so that no member can end the row
	// and draw another (a "key verified" row under a NOT VERIFIED one).
	// A long value is folded here, onto continuation lines that begin
	// with "↳", before the terminal wraps it: a terminal's own wrap would
	// start a line with whatever the signer put at that column, such as
	// "  key      verified ...".
	row := func(k, format string, args ...any) {
		for i, part := range fold(safeText(fmt.Sprintf(format, args...)), foldWidth) {
			if i == 0 {
				fmt.Fprintf(w, "  %-8s %s\n", k, part)
			} else {
				fmt.Fprintf(w, "  %-8s ↳ %s\n", "", part)
			}
		}
	}
	row("digest", "sha-256 %s", d)
	o, s, err := handoff.UnsafeDecode(el)
	if err != nil {
		row("error", "%v", err)
		fmt.Fprintln(w)
		return
	}
	switch {
	case o != nil:
		row("type", "offer")
		row("hop", "%s", o.Hop)
		row("iss", "%s", o.Iss)
		row("aud", "%s", o.Aud)
		row("dialog", "%s", o.Dialog)
		if o.Task != "" {
			row("task", "%s", o.Task)
		}
		row("iat", "%s", when(o.Iat))
		row("exp", "%s  (lifetime %d s)", when(o.Exp), o.Exp-o.Iat)
		if o.Obo != nil {
			if o.Obo.Iss != "" {
				row("obo", "sub %q in the namespace of %q", o.Obo.Sub, o.Obo.Iss)
			} else {
				row("obo", "sub %q", o.Obo.Sub)
			}
		}
		if o.Grant != nil {
			row("grant", "%s %s", o.Grant.Alg, o.Grant)
		}
		if o.Prev != nil {
			row("prev", "%s %s", o.Prev.Alg, o.Prev)
		} else {
			row("prev", "none: this offer starts the chain")
		}
		for i, r := range o.Refs {
			loc := ""
			if r.Loc != "" {
				loc = " at " + r.Loc
			}
			row(fmt.Sprintf("refs[%d]", i), "%s %s %s%s", r.Kind, r.Dig.Alg, r.Dig, loc)
		}
		extras(row, o.Extra)
		keyRows(row, el, o.Iss, keys)
	case s != nil:
		row("type", "status")
		row("state", "%s", s.State)
		if s.Reason != "" {
			row("reason", "%s", s.Reason)
		}
		if s.Detail != "" {
			row("detail", "%q", s.Detail)
		}
		row("iss", "%s", s.Iss)
		row("aud", "%s", s.Aud)
		row("offer", "%s %s", s.Offer.Alg, s.Offer)
		row("iat", "%s", when(s.Iat))
		for i, r := range s.Refs {
			row(fmt.Sprintf("refs[%d]", i), "%s %s %s", r.Kind, r.Dig.Alg, r.Dig)
		}
		extras(row, s.Extra)
		keyRows(row, el, s.Iss, keys)
	}
	fmt.Fprintln(w)
}

func extras(row func(k, format string, args ...any), extra map[string]any) {
	for _, k := range sortedKeys(extra) {
		row("unknown", "member %q (kept, covered by the signature)", k)
	}
}

func when(t int64) string {
	return fmt.Sprintf("%d  %s", t, time.Unix(t, 0).UTC().Format(time.RFC3339))
}

// keyLine says which trusted key verified the element, if a trust file was
// given.
func keyRows(row func(k, format string, args ...any), el handoff.Element, iss string, keys *trust.Config) {
	if keys == nil {
		row("key", "not checked (give --trust to check the signature)")
		return
	}
	k, err := handoff.VerifyElement(el, keys)
	if err != nil {
		row("key", "NOT VERIFIED: %v", err)
		return
	}
	// Two rows, each short enough not to be folded: the key, then whom
	// the trust file binds it to.
	row("key", "verified: %s key %s", k.Alg, k.Kid)
	row("signer", "bound to %s", iss)
}

// drawChain draws the chain oldest first as text (picture.Chain.SVG
// draws the same picture for a page): each agent, and between two agents
// the offer that handed the work over, with its hop, form and whether its
// prev link and continuity hold.
func drawChain(w io.Writer, c picture.Chain) {
	fmt.Fprintln(w, "Chain, oldest first:")
	fmt.Fprintln(w)
	for i, o := range c.Offers {
		if o.Unreadable {
			fmt.Fprintf(w, "      ?  element %d cannot be read\n", i)
			continue
		}
		switch {
		case o.Start == picture.Started:
			fmt.Fprintf(w, "  %s  (start of the chain)\n", agentLine(o.From))
		case o.Start == picture.Partial:
			fmt.Fprintf(w, "  %s  (partial: earlier offers not carried)\n", agentLine(o.From))
		case o.Discontinuous:
			fmt.Fprintf(w, "  %s  (DISCONTINUOUS: the previous offer went elsewhere)\n", agentLine(o.From))
		}
		fmt.Fprintf(w, "      │ hop %s  %s  %s  %s\n", safeText(short(o.Hop)), o.Form, o.Iat.Format("15:04:05"), o.Link)
		if m := marks(o); m != "" {
			fmt.Fprintf(w, "      │ %s\n", m)
		}
		if o.OnBehalfOf != nil {
			// Folded as the rows are: a long sub must not wrap onto a
			// line of its own choosing.
			for j, part := range fold(safeText("on behalf of "+principal(o.OnBehalfOf)), foldWidth) {
				if j == 0 {
					fmt.Fprintf(w, "      │ %s\n", part)
				} else {
					fmt.Fprintf(w, "      │ ↳ %s\n", part)
				}
			}
		}
		fmt.Fprintf(w, "      ▼\n")
		fmt.Fprintf(w, "  %s\n", agentLine(o.To))
	}
}

// foldWidth is the widest value inspect prints on one line: with the
// label column, a row stays within 80 columns.
const foldWidth = 64

// agentLine is an AgentId in the chain picture: escaped, folded like a
// row's value, the continuation lines indented under it.
func agentLine(id string) string {
	return strings.Join(fold(safeText(id), foldWidth), "\n    ↳ ")
}

// fold cuts s into pieces of at most width columns, counting a rune of
// the wide East Asian ranges (U+1100 and above, roughly) as two.
func fold(s string, width int) []string {
	var parts []string
	start, cols := 0, 0
	for i, r := range s {
		w := 1
		if r >= 0x1100 {
			w = 2
		}
		if cols+w > width {
			parts = append(parts, s[start:i])
			start, cols = i, 0
		}
		cols += w
	}
	return append(parts, s[start:])
}

func short(s string) string {
	if len(s) > 10 {
		return s[:10] + "…"
	}
	return s
}

// sortedKeys gives the unknown members in a stable order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// verdict is what a receiver with the trust file would decide on the
// Handoff: inspect's first line.
type verdict struct {
	Checked    bool   `json:"checked"` // false without --trust
	Me         string `json:"me,omitempty"`
	Result     string `json:"result,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Chain      string `json:"chain,omitempty"`
	Error      string `json:"error,omitempty"`
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
}

// judge runs the receiving checks on b as me (default: the offer's aud)
// would, with a fresh memory, in the offer's own dialog: what its audience
// decides, if it has these keys. Without keys nothing is judged.
func judge(b []byte, h *handoff.Handoff, keys *trust.Config, me string, now func() time.Time) verdict {
	o, _, _ := handoff.UnsafeDecode(h.Offer)
	var v verdict
	v.OnBehalfOf = onBehalfOf(h)
	if keys == nil {
		return v
	}
	v.Checked = true
	dialog := ""
	if o != nil {
		dialog = o.Dialog
		if me == "" {
			me = o.Aud
		}
	}
	v.Me = me
	r, err := handoff.NewReceiver(handoff.Options{Me: me, Keys: keys, Now: now})
	if err != nil {
		v.Error = err.Error()
		return v
	}
	res, err := r.Receive(context.Background(), b, dialog)
	if res == nil {
		v.Error = err.Error()
		return v
	}
	v.Result, v.Reason, v.Chain = string(res.Outcome), string(res.Reason), string(res.ChainQuality)
	if res.Err != nil {
		v.Error = res.Err.Error()
	}
	return v
}

func printVerdict(w io.Writer, v verdict) {
	var line string
	switch {
	case !v.Checked:
		line = "none (give --trust TRUSTFILE to judge it as its audience would)"
	case v.Result == "":
		line = "none: " + v.Error
	case v.Result == string(handoff.Accepted):
		line = fmt.Sprintf("accepted by %s; chain %s", v.Me, v.Chain)
	default:
		line = fmt.Sprintf("%s (%s) by %s: %s", v.Result, v.Reason, v.Me, v.Error)
	}
	// Escaped and folded as the rows are: the verdict may quote what a
	// hostile signer put in the offer.
	head := func(label, text string) {
		for i, part := range fold(safeText(text), foldWidth) {
			if i == 0 {
				fmt.Fprintf(w, "%-13s %s\n", label, part)
			} else {
				fmt.Fprintf(w, "%-13s ↳ %s\n", "", part)
			}
		}
	}
	head("Verdict:", line)
	if v.OnBehalfOf != "" {
		head("On behalf of:", v.OnBehalfOf)
	}
	fmt.Fprintln(w)
}

// onBehalfOf names the principal the work is done for: the offer's obo,
// else the latest one in the chain (with where it is stated).
func onBehalfOf(h *handoff.Handoff) string {
	if o, _, _ := handoff.UnsafeDecode(h.Offer); o != nil && o.Obo != nil {
		return principal(o.Obo)
	}
	for i := len(h.Chain) - 1; i >= 0; i-- {
		if o, _, _ := handoff.UnsafeDecode(h.Chain[i]); o != nil && o.Obo != nil {
			return fmt.Sprintf("%s (stated by chain[%d])", principal(o.Obo), i)
		}
	}
	return ""
}

// principal names an obo principal.
func principal(p *handoff.Principal) string {
	if p.Iss != "" {
		return fmt.Sprintf("%q (in the namespace of %q)", p.Sub, p.Iss)
	}
	return strconv.Quote(p.Sub)
}

// marks are the text picture's notes on one offer: whether a trusted key
// verified it, and whether it has expired.
func marks(o picture.Offer) string {
	var m []string
	switch o.Signature {
	case picture.Verified:
		m = append(m, "trusted")
	case picture.Unverifiable:
		m = append(m, "UNTRUSTED")
	}
	if o.Expired {
		m = append(m, "expired "+o.ExpiredFor.String()+" ago")
	}
	return strings.Join(m, ", ")
}

// inspected is inspect --json: the verdict, then every element, oldest
// first.
type inspected struct {
	Encoding string        `json:"encoding"`
	Verdict  verdict       `json:"verdict"`
	Elements []inspectedEl `json:"elements"`
}

type inspectedEl struct {
	Label   string   `json:"label"`
	Form    string   `json:"form"`
	Octets  int      `json:"octets"`
	Digest  string   `json:"digest"`
	Type    string   `json:"type"` // "offer", "status" or "unreadable"
	Error   string   `json:"error,omitempty"`
	Hop     string   `json:"hop,omitempty"`
	Iss     string   `json:"iss,omitempty"`
	Aud     string   `json:"aud,omitempty"`
	Dialog  string   `json:"dialog,omitempty"`
	Task    string   `json:"task,omitempty"`
	Iat     *int64   `json:"iat,omitempty"` // present when the element has it, 0 included
	Exp     *int64   `json:"exp,omitempty"`
	Expired bool     `json:"expired"`
	Obo     *oboJSON `json:"obo,omitempty"`
	Prev    string   `json:"prev,omitempty"`
	Refs    int      `json:"refs"`
	Key     string   `json:"key"` // "verified", "untrusted" or "not-checked"
	Kid     string   `json:"kid,omitempty"`
}

// oboJSON is an offer's obo in inspect --json.
type oboJSON struct {
	Sub string `json:"sub"`
	Iss string `json:"iss,omitempty"`
}

func inspectJSON(e env, h *handoff.Handoff, enc string, keys *trust.Config, v verdict, now time.Time) error {
	out := inspected{Encoding: enc, Verdict: v}
	els := append(append([]handoff.Element{}, h.Chain...), h.Offer)
	for i, el := range els {
		label := "offer"
		if i < len(h.Chain) {
			label = fmt.Sprintf("chain[%d]", i)
		}
		x := inspectedEl{Label: label, Form: el.Form.String(), Octets: len(el.Octets), Digest: el.Digest().String(), Key: "not-checked"}
		if keys != nil {
			if k, err := handoff.VerifyElement(el, keys); err == nil {
				x.Key, x.Kid = "verified", k.Kid
			} else {
				x.Key = "untrusted"
			}
		}
		o, s, err := handoff.UnsafeDecode(el)
		switch {
		case err != nil:
			x.Type, x.Error = "unreadable", err.Error()
		case o != nil:
			x.Type, x.Hop, x.Iss, x.Aud, x.Dialog, x.Task, x.Iat, x.Exp = "offer", o.Hop, o.Iss, o.Aud, o.Dialog, o.Task, &o.Iat, &o.Exp
			x.Expired, x.Refs = o.Exp <= now.Unix(), len(o.Refs)
			if o.Obo != nil {
				x.Obo = &oboJSON{Sub: o.Obo.Sub, Iss: o.Obo.Iss}
			}
			if o.Prev != nil {
				x.Prev = o.Prev.String()
			}
		case s != nil:
			x.Type, x.Iss, x.Aud, x.Iat, x.Refs = "status", s.Iss, s.Aud, &s.Iat, len(s.Refs)
		}
		out.Elements = append(out.Elements, x)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	_, err = e.stdout.Write(append(safeJSON(b), '\n'))
	return err
}
