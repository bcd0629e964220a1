package main

import (
	"fmt"
	"io"
	"strings"
)

// writeText writes the report for people: one section per subject, the subject in the
// first column.
func writeText(w io.Writer, r Report) error {
	var b strings.Builder
	section := func(title string, lines ...string) {
		for i, l := range lines {
			head := ""
			if i == 0 {
				head = title
			}
			fmt.Fprintf(&b, "%-12s%s\n", head, l)
		}
		b.WriteString("\n")
	}

	m := r.Module
	build := fmt.Sprintf("%s %s", m.Go, m.Platform)
	if m.Cgo {
		build += ", cgo"
	} else {
		build += ", no cgo: no library can be loaded (rebuild with CGO_ENABLED=1)"
	}
	if m.Revision != "" {
		build += ", revision " + short(m.Revision)
		if m.Modified {
			build += " (modified)"
		}
	}
	path := m.Path
	if path == "" {
		path = "(unknown module)"
	}
	section("module", path+" "+m.Version, build)

	section("NCCL", libraryLines(r.NCCL)...)
	section("CUDA", libraryLines(r.CUDA)...)
	section("GPUs", gpuLines(r.GPUs)...)

	env := []string{"no NCCL_* or NCCLGO_* variable set"}
	if len(r.Env) > 0 {
		env = env[:0]
		for _, e := range r.Env {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	section("environment", env...)

	var cov []string
	for _, c := range r.Coverage {
		cov = append(cov, coverageLines(c)...)
	}
	section("coverage", cov...)

	_, err := io.WriteString(w, strings.TrimRight(b.String(), "\n")+"\n")
	return err
}

// libraryLines tells what was loaded, from where and why, and every file tried.
func libraryLines(l Library) (out []string) {
	if l.Loaded {
		version := l.Version
		if version == "" {
			version = "version unknown"
		}
		out = append(out, version, l.Path, "found through "+l.Source)
	} else if len(l.Attempts) > 0 {
		out = append(out, "not loaded: no candidate file could be loaded")
	} else {
		out = append(out, "not loaded: "+l.Error)
	}
	if len(l.Hint) > 0 {
		defer func() { out = append(append(out, "how to make it load:"), indentAll(l.Hint)...) }()
	}
	if len(l.Attempts) == 0 {
		return out
	}
	out = append(out, "search order, first success wins:")
	for i, a := range l.Attempts {
		result := "loaded"
		if a.Error != "" {
			result = strings.TrimPrefix(a.Error, a.Path+": ")
		}
		out = append(out, fmt.Sprintf("  %d. %-22s %s: %s", i+1, a.Source, a.Path, result))
	}
	return out
}

func indentAll(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = "  " + s
	}
	return out
}

// gpuLines lists the devices and the peer matrix.
func gpuLines(g GPUs) []string {
	var out []string
	if g.Count == 0 && g.Error == "" {
		return []string{"none: the driver reports 0 devices"}
	}
	if g.Count == 0 {
		return []string{"none: " + g.Error}
	}
	out = append(out, fmt.Sprintf("%d visible", g.Count))
	for _, d := range g.Devices {
		out = append(out, fmt.Sprintf("  %d  %s, %s, compute capability %s, %d SMs, PCI %s",
			d.Index, d.Name, gib(d.MemoryBytes), d.ComputeCapability, d.Multiprocessors, d.PCIBusID))
	}
	if g.Count > 1 && len(g.Peers) > 0 {
		out = append(out, "peer access from row to column (P: peer access, A: native atomics, an NVLink-class link; rN: performance rank, lower is faster):")
		head := "      "
		for j := range g.Count {
			head += fmt.Sprintf("%-8d", j)
		}
		out = append(out, strings.TrimRight(head, " "))
		cell := map[[2]int]string{}
		for _, p := range g.Peers {
			s := "-"
			if p.Access {
				s = "P"
				if p.NativeAtomics {
					s += "A"
				}
				s += fmt.Sprintf(" r%d", p.PerformanceRank)
			}
			cell[[2]int{p.From, p.To}] = s
		}
		for i := range g.Count {
			line := fmt.Sprintf("  %-4d", i)
			for j := range g.Count {
				c, ok := cell[[2]int{i, j}]
				switch {
				case i == j:
					c = "x"
				case !ok:
					c = "?"
				}
				line += fmt.Sprintf("%-8s", c)
			}
			out = append(out, strings.TrimRight(line, " "))
		}
	}
	if g.Error != "" {
		out = append(out, "query stopped: "+g.Error)
	}
	return out
}

// coverageLines summarises one raw package and lists its missing functions.
func coverageLines(c Coverage) []string {
	if c.Error != "" {
		return []string{fmt.Sprintf("%s: unknown: %s", c.Package, c.Error)}
	}
	line := fmt.Sprintf("%s: %d of %d functions present in %s", c.Package, c.Present, c.Functions, c.Library)
	if len(c.Missing) == 0 {
		return []string{line}
	}
	out := []string{fmt.Sprintf("%s; %d missing (first pinned header declaring each):", line, len(c.Missing))}
	var cur string
	for _, m := range c.Missing {
		item := m.Symbol + " (" + m.Since + ")"
		if cur != "" && len(cur)+2+len(item) > 96 {
			out = append(out, "  "+cur)
			cur = ""
		}
		if cur != "" {
			cur += ", "
		}
		cur += item
	}
	return append(out, "  "+cur)
}

// gib writes a byte count in GiB with one decimal.
func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// short abbreviates a VCS revision.
func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
