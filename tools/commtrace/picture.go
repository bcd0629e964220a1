package main

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ncclgo/ncclgo/comm/flightrec"
)

// The picture of a hang: per communicator (in the verdicts' order, the cause first),
// one lane per rank with its operations in sequence order, one column per sequence
// number, coloured by state; a thick outline where each rank stopped (its first
// operation not completed), a dashed cell where a rank never called what the others
// called, the verdict's operation marked, and the culprits' lanes in red (victims'
// in orange). Plain SVG (or SVG in an HTML page): no script, no external asset.

const (
	labelW = 300 // the lane labels' width
	cellW  = 128
	cellH  = 30
	laneH  = 36
	headH  = 52 // a communicator's title
	margin = 12
)

// Colours by state.
var stateFill = map[string]string{
	"completed": "#9bd3a6",
	"started":   "#ffd36b",
	"scheduled": "#b9d7f5",
}

// column is one sequence number of a communicator.
type column struct {
	p2p bool
	seq int64
}

// cell is what one rank recorded under one column.
type cell struct {
	op, state, text string
}

// section is one communicator's part of the picture.
type section struct {
	v     flightrec.Verdict
	cols  []column
	lanes []lane
}

type lane struct {
	rank  int
	dump  bool
	cells map[column]cell
}

// sections lays the verdicts' communicators out.
func sections(traces []*flightrec.Trace, vs []flightrec.Verdict) []section {
	byRank := map[int]*flightrec.Trace{}
	for _, t := range traces {
		byRank[t.Rank] = t
	}
	var out []section
	for _, v := range vs {
		s := section{v: v}
		seen := map[column]bool{}
		for _, r := range v.Group.Ranks {
			l := lane{rank: r, cells: map[column]cell{}}
			t := byRank[r]
			if t != nil {
				l.dump = true
				for i := range t.Entries {
					e := &t.Entries[i]
					if e.Group != v.Group.Name || e.Op() == "coalesced" {
						continue
					}
					c := column{e.IsP2P, e.Seq()}
					prev, ok := l.cells[c]
					text := e.Op()
					if ok { // a group of several operations under one number
						text = prev.text + "+" + text
					}
					state := e.State
					if ok && rankOf(prev.state) < rankOf(state) {
						state = prev.state // the group is as far as its least advanced part
					}
					l.cells[c] = cell{op: e.Op(), state: state, text: text}
					if !seen[c] {
						seen[c] = true
						s.cols = append(s.cols, c)
					}
				}
			}
			s.lanes = append(s.lanes, l)
		}
		slices.SortFunc(s.cols, func(a, b column) int {
			if c := cmp.Compare(a.seq, b.seq); c != 0 {
				return c
			}
			if a.p2p == b.p2p {
				return 0
			}
			if a.p2p {
				return 1
			}
			return -1
		})
		out = append(out, s)
	}
	return out
}

func rankOf(state string) int {
	switch state {
	case "completed":
		return 2
	case "started":
		return 1
	}
	return 0
}

// writeSVG draws the picture as one SVG document (without the XML declaration when
// inline, for an HTML page).
func writeSVG(w io.Writer, traces []*flightrec.Trace, vs []flightrec.Verdict, inline bool) error {
	ss := sections(traces, vs)
	width := labelW + 2*margin
	height := margin
	for _, s := range ss {
		// About 7 pixels a character for the headline.
		width = max(width, labelW+2*margin+cellW*len(s.cols), 2*margin+7*len(headline(s.v)))
		height += headH + laneH*len(s.lanes) + margin
	}
	height += 40 // the legend
	var b strings.Builder
	if !inline {
		b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	b.WriteString(`<rect width="100%" height="100%" fill="#ffffff"/>` + "\n")
	y := margin
	for _, s := range ss {
		drawSection(&b, s, y)
		y += headH + laneH*len(s.lanes) + margin
	}
	legend(&b, y)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func drawSection(b *strings.Builder, s section, y int) {
	v := s.v
	role := "agree"
	switch {
	case v.Problem == "":
	case v.Victim():
		role = "victim"
	default:
		role = "cause"
	}
	fmt.Fprintf(b, `<g class="communicator %s" data-name="%s" data-ranks="%s">`+"\n", role, esc(v.Group.Name), esc(fmt.Sprint(v.Group.Ranks)))
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">communicator %s (%s, ranks %v)</text>`+"\n",
		margin, y+18, esc(fmt.Sprintf("%q", v.Group.Name)), esc(v.Group.Desc), v.Group.Ranks)
	fmt.Fprintf(b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", margin, y+38, roleColour(role), esc(headline(v)))
	// The verdict's column.
	x0 := margin + labelW
	for i, c := range s.cols {
		if v.Problem != "" && v.Problem != flightrec.NoDump && c.p2p == v.P2P && c.seq == v.Seq {
			fmt.Fprintf(b, `<rect class="verdict-column" x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#c0392b" stroke-width="2"/>`+"\n",
				x0+i*cellW+1, y+headH-6, cellW-2, laneH*len(s.lanes)+4)
		}
	}
	for li, l := range s.lanes {
		ly := y + headH + li*laneH
		class, label, colour := "lane", fmt.Sprintf("rank %d", l.rank), "#222222"
		if w, ok := v.Victims[l.rank]; ok && slices.Contains(v.Culprits, l.rank) {
			class, colour = "lane victim", roleColour("victim")
			label += fmt.Sprintf(": victim, blocked in %q #%d", w.Group.Name, w.Seq)
		} else if slices.Contains(v.Culprits, l.rank) {
			class, colour = "lane culprit", roleColour("cause")
			label += ": culprit"
			if v.Problem == flightrec.NoDump {
				label += " (no dump)"
			}
		} else if !l.dump {
			label += ": no dump"
		}
		if v.Problem == flightrec.Mismatch && !v.P2P {
			// What this rank called, without the operation's name (its cells show it).
			for t, rs := range v.Calls {
				if slices.Contains(rs, l.rank) {
					_, args, _ := strings.Cut(t, " ")
					label += ", " + clip(args, 26)
				}
			}
		}
		fmt.Fprintf(b, `<g class="%s" data-rank="%d">`+"\n", class, l.rank)
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="%s"%s>%s</text>`+"\n", margin, ly+cellH/2+4, colour, boldIf(class != "lane"), esc(label))
		stopped, lastCell := false, -1
		for i, c := range s.cols {
			x := x0 + i*cellW
			e, ok := l.cells[c]
			if !ok {
				if l.dump && (!stopped || c.seq <= v.Seq && v.Problem == flightrec.Missing) && beforeVerdict(c, v) {
					fmt.Fprintf(b, `<rect class="missing" x="%d" y="%d" width="%d" height="%d" rx="4" fill="#ffffff" stroke="#c0392b" stroke-dasharray="4 3"/>`+"\n",
						x+4, ly, cellW-8, cellH)
					fmt.Fprintf(b, `<text x="%d" y="%d" fill="#c0392b">not called #%d</text>`+"\n", x+10, ly+cellH/2+4, c.seq)
				}
				continue
			}
			lastCell = i
			stroke, sw := "#555555", 1
			class := "op " + e.state
			if !stopped && e.state != "completed" {
				stopped = true
				stroke, sw = "#000000", 3
				class += " stopped"
			}
			kind := "#"
			if c.p2p {
				kind = "p2p #"
			}
			fmt.Fprintf(b, `<rect class="%s" x="%d" y="%d" width="%d" height="%d" rx="4" fill="%s" stroke="%s" stroke-width="%d"><title>%s</title></rect>`+"\n",
				class, x+4, ly, cellW-8, cellH, fillOf(e.state), stroke, sw,
				esc(fmt.Sprintf("rank %d %s%d %s: %s", l.rank, kind, c.seq, e.text, e.state)))
			fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", x+10, ly+cellH/2+4, esc(clip(fmt.Sprintf("%s%d %s", kind, c.seq, e.text), 17)))
		}
		if !stopped && l.dump {
			// Everything completed: the rank stopped after its last operation.
			x := x0 + (lastCell+1)*cellW
			fmt.Fprintf(b, `<path class="stopped-after" d="M %d %d v %d" stroke="#000000" stroke-width="3"/>`+"\n", x, ly-2, cellH+4)
		}
		b.WriteString("</g>\n")
	}
	b.WriteString("</g>\n")
}

// beforeVerdict says whether a rank's empty cell at c is worth marking: at or before
// the verdict's operation (later ones are simply not reached).
func beforeVerdict(c column, v flightrec.Verdict) bool {
	return v.Problem != "" && c.p2p == v.P2P && c.seq <= v.Seq
}

func headline(v flightrec.Verdict) string {
	kind := "collective"
	if v.P2P {
		kind = "p2p"
	}
	switch {
	case v.Problem == "":
		return "ranks agree"
	case v.Problem == flightrec.NoDump:
		return fmt.Sprintf("no dump from ranks %v", v.Culprits)
	case v.Victim():
		return fmt.Sprintf("%s #%d: %s ranks %v, victims of another communicator", kind, v.Seq, v.Problem, v.Culprits)
	case len(v.Culprits) == 0:
		return fmt.Sprintf("%s #%d: %s, no culprit: as many ranks made each call", kind, v.Seq, v.Problem)
	}
	return fmt.Sprintf("%s #%d: %s ranks %v: the cause", kind, v.Seq, v.Problem, v.Culprits)
}

func legend(b *strings.Builder, y int) {
	x := margin
	for _, st := range []string{"completed", "started", "scheduled"} {
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="18" height="14" fill="%s" stroke="#555555"/><text x="%d" y="%d">%s</text>`+"\n", x, y+10, fillOf(st), x+24, y+21, st)
		x += 110
	}
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="18" height="14" fill="#ffffff" stroke="#000000" stroke-width="3"/><text x="%d" y="%d">where the rank stopped</text>`+"\n", x, y+10, x+24, y+21)
	x += 170
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="18" height="14" fill="#ffffff" stroke="#c0392b" stroke-dasharray="4 3"/><text x="%d" y="%d">not called</text>`+"\n", x, y+10, x+24, y+21)
}

func fillOf(state string) string {
	if f, ok := stateFill[state]; ok {
		return f
	}
	return "#dddddd"
}

func roleColour(role string) string {
	switch role {
	case "cause":
		return "#c0392b"
	case "victim":
		return "#d35400"
	}
	return "#1e7e34"
}

func boldIf(b bool) string {
	if b {
		return ` font-weight="bold"`
	}
	return ""
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// writeHTML writes a self-contained page: the verdicts' text and the picture.
func writeHTML(w io.Writer, traces []*flightrec.Trace, vs []flightrec.Verdict) error {
	var report strings.Builder
	if err := flightrec.Report(&report, vs); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("<!DOCTYPE html>\n")
	b.WriteString(`<html xmlns="http://www.w3.org/1999/xhtml" lang="en"><head><meta charset="utf-8"/><title>commtrace</title>` +
		`<style>body{font-family:sans-serif;margin:16px}pre{background:#f6f6f6;padding:8px;overflow-x:auto}</style></head><body>` + "\n")
	b.WriteString("<h1>commtrace: the flight recorder's dumps</h1>\n<pre>")
	b.WriteString(esc(report.String()))
	b.WriteString("</pre>\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if err := writeSVG(w, traces, vs, true); err != nil {
		return err
	}
	_, err := io.WriteString(w, "</body></html>\n")
	return err
}
