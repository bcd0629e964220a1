package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress writes a status line on stderr while a long run goes on: nothing during
// the first seconds, then at most one line per interval. On a terminal the line is
// rewritten in place and cleared at the end.
type progress struct {
	w        io.Writer
	tty      bool
	quiet    time.Duration // no line before this much time has passed
	interval time.Duration // at most one line per interval
	now      func() time.Time

	start, last time.Time
	shown       bool
}

// newProgress reports on w, rewriting its line when w is a terminal.
func newProgress(w io.Writer) *progress {
	p := &progress{w: w, quiet: 2 * time.Second, interval: time.Second, now: time.Now}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	p.start = p.now()
	return p
}

// update tells that test s starts size number i of total.
func (p *progress) update(s test, size int64, i, total int) {
	if p == nil || p.w == nil {
		return
	}
	now := p.now()
	if now.Sub(p.start) < p.quiet || (p.shown && now.Sub(p.last) < p.interval) {
		return
	}
	p.last, p.shown = now, true
	line := fmt.Sprintf("commbench: %s %s %s: %d bytes, size %d of %d, %s elapsed",
		s.coll.name, typeName(s.t), s.opName(), size, i+1, total, now.Sub(p.start).Round(time.Second))
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

// done clears the terminal line, if one was written.
func (p *progress) done() {
	if p != nil && p.tty && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
