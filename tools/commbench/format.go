package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// simMark ends every line of a simulated run's table output.
const simMark = "SIMULATED"

// simNote says what a simulated run measures.
const simNote = "comm's NCCL backend on commtest's host-memory simulator: times measure the Go software layers only, not a GPU, NVLink or a network"

// textOut writes nccl-tests' table. In a simulated run every line ends with SIMULATED.
type textOut struct {
	w   io.Writer
	sim bool
	err error
}

// line writes one line, marked when simulated, and remembers the first write error.
func (o *textOut) line(format string, args ...any) {
	s := strings.TrimRight(fmt.Sprintf(format, args...), " ")
	if o.sim {
		s += "  " + simMark
	}
	if o.err == nil {
		_, o.err = fmt.Fprintln(o.w, s)
	}
}

// preamble describes the run: the tool, the parameters and the devices.
func (o *textOut) preamble(c config, version string, w *world) {
	o.line("# commbench (ncclgo %s): nccl-tests for comm", version)
	if o.sim {
		o.line("# %s: %d ranks of %s", simMark, w.worldSize(), simNote)
	}
	step, kind := c.stepFactor, "factor"
	if c.stepFactor == 1 {
		step, kind = c.stepBytes, "bytes"
	}
	o.line("# nThread 1 nGpus %d minBytes %d maxBytes %d step: %d(%s) warmup iters: %d iters: %d agg iters: %d validation: %d graph: %d",
		len(w.ranks), c.minBytes, c.maxBytes, step, kind, c.warmup, c.iters, c.aggIters, c.check, c.graphs)
	if c.blocking != 0 || c.average != avgMean {
		o.line("# blocking: %d average: %d(%s)", c.blocking, int(c.average), c.average)
	}
	o.line("#")
	o.line("# Using devices")
	for _, d := range w.devices {
		o.line("#  %s", d)
	}
	o.line("#")
}

// header starts the table of one collective.
func (o *textOut) header(coll collective) {
	o.line("# Collective test starting: %s", coll.name)
	if !coll.outOfPlace {
		o.line("# comm's %s is in place only: out-of-place columns are N/A", coll.name)
	}
	if coll.noInPlace {
		o.line("# comm's %s needs separate send and receive buffers: in-place columns are N/A", coll.name)
	}
	if coll.uncheckedInPlace {
		o.line("# in-place %s sends from and receives into one buffer: timed, not checked (#wrong N/A), as in nccl-tests", coll.name)
	}
	o.line("#")
	o.line("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place", "", "", "", "", "")
	o.line("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	o.line("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
}

// row writes one size's line.
func (o *textOut) row(r row) {
	o.line("%12d  %12d  %8s  %6s  %6d%s%s", r.Size, r.Count, r.Type, r.RedOp, r.Root, body(r.OutOfPlace), body(r.InPlace))
}

// body formats one column group: time, algbw, busbw, #wrong; N/A in each for a form
// comm does not offer, N/A for #wrong when results were not checked.
func body(m *measure) string {
	if m == nil {
		return fmt.Sprintf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A")
	}
	wrong := "N/A"
	if m.Wrong != nil {
		wrong = strconv.FormatInt(*m.Wrong, 10)
	}
	return fmt.Sprintf("  %7s  %6s  %6s  %6s", fixed(m.TimeUS, 7), fixed(m.AlgBW, 6), fixed(m.BusBW, 6), wrong)
}

// footer ends the table of one collective with nccl-tests' two summary lines.
func (o *textOut) footer(t *table) {
	status := "OK"
	if t.OutOfBounds > 0 {
		status = "FAILED"
	}
	o.line("# %-20s : %d %s", "Out of bounds values", t.OutOfBounds, status)
	o.line("# %-20s : %s", "Avg bus bandwidth", strconv.FormatFloat(t.AvgBusBW, 'g', 6, 64))
	o.line("#")
	o.line("# Collective test concluded: %s", t.Collective)
	o.line("#")
}

// fixed writes v right-aligned in width columns the way nccl-tests does: two decimals
// while they fit, then one, then none, then an exponent.
func fixed(v float64, width int) string {
	digits := 0 // digits of the integer part
	for p := 1.0; v >= p && digits < 40; p *= 10 {
		digits++
	}
	switch {
	case digits < width-2:
		return fmt.Sprintf("%*.2f", width, v)
	case digits < width-1:
		return fmt.Sprintf("%*.1f", width, v)
	case digits < width+1:
		return fmt.Sprintf("%*.0f", width, v)
	case width >= 7:
		return fmt.Sprintf("%*.1e", width, v)
	}
	return fmt.Sprintf("%*.0e", width, v)
}
