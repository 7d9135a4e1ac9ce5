package picture

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/safetext"
)

// Class is the class of the picture's root element, which every rule of
// its style names first.
const Class = "handoff-chain"

// SVG draws c as a standalone SVG document, top to bottom: each agent a
// box, each offer an arrow from its delegator's box to its delegate's,
// marked with its hop, form and time, what its prev link says, and its
// signature (verified green, unverifiable red, not checked grey). Every
// text the signers chose is escaped; the document loads nothing.
func (c Chain) SVG(w io.Writer) error {
	const width, boxH, arrowH, pad = 640, 34, 86, 12
	var b bytes.Buffer
	y := pad
	box := func(label string, warn string) {
		stroke := "#444"
		if warn != "" {
			stroke = "#b00020"
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" rx="6" fill="#f4f6fa" stroke="%s"/>`+"\n", pad, y, width-2*pad, boxH, stroke)
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="agent">%s</text>`+"\n", 2*pad, y+22, esc(clip(label, 70)))
		if warn != "" {
			fmt.Fprintf(&b, `<text x="%d" y="%d" class="warn" text-anchor="end">%s</text>`+"\n", width-2*pad, y+22, esc(warn))
		}
		y += boxH
	}
	for i, o := range c.Offers {
		if o.Unreadable {
			y += pad
			box(fmt.Sprintf("element %d cannot be read", i), "unreadable")
			continue
		}
		switch {
		case i == 0 && o.Start == Partial:
			box(o.From, "partial: earlier offers not carried")
		case i == 0:
			box(o.From, "")
		case o.Discontinuous:
			y += pad
			box(o.From, "discontinuous: the previous offer went elsewhere")
		}
		color, mark := "#777", "signature not checked"
		switch o.Signature {
		case Verified:
			color, mark = "#1b7f3b", "verified"
		case Unverifiable:
			color, mark = "#b00020", "UNVERIFIABLE"
		}
		y += pad // the arrow leaves the box below it
		x := pad + 28
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3" marker-end="url(#head)"/>`+"\n", x, y, x, y+arrowH, color)
		lines := []string{
			fmt.Sprintf("hop %s  %s  %s", clip(o.Hop, 24), o.Form, o.Iat.Format("2006-01-02 15:04:05Z")),
			fmt.Sprintf("%s · %s", mark, o.Link),
		}
		if o.Expired {
			lines[1] += " · expired " + o.ExpiredFor.String() + " ago"
		}
		if o.OnBehalfOf != nil {
			p := "on behalf of " + o.OnBehalfOf.Sub
			if o.OnBehalfOf.Iss != "" {
				p += " (" + o.OnBehalfOf.Iss + ")"
			}
			lines = append(lines, clip(p, 70))
		}
		for j, l := range lines {
			class := "offer"
			if j == 1 && (o.Signature == Unverifiable || (o.Link != LinkOK && o.Link != LinkStart && o.Link != LinkNotHere)) {
				class = "warn"
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" class="%s">%s</text>`+"\n", x+18, y+24+j*20, class, esc(l))
		}
		y += arrowH + 6
		box(o.To, "")
	}
	y += pad
	// Every rule of its style is scoped to the picture (Class): drawn
	// inline in a page (the operator console's), a <style> applies to the
	// whole document, where .warn would style the page's own .warn.
	_, err := fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" class="`+Class+`" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="the chain of offers, oldest first">
<defs><marker id="head" viewBox="0 0 10 10" refX="8" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#444"/></marker>
<style>.`+Class+` text{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:13px;fill:#222}.`+Class+` .agent{font-weight:bold}.`+Class+` .warn{fill:#b00020;font-weight:bold}</style></defs>
%s</svg>
`, width, y, width, y, b.String())
	return err
}

// esc escapes s for SVG text: first as the terminal's text is
// (safetext: controls, bidi overrides and invisible runes written as
// \u escapes, so that a page cannot show a name the octets do not say),
// then for XML.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(safetext.Text(s)))
	return b.String()
}

// clip shortens s, escaped (safetext), to at most n runes, marking the
// cut: an escape is cut as the text is, never dropped unseen.
func clip(s string, n int) string {
	s = safetext.Text(s)
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
