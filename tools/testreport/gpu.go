package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A step is one command of the GPU bundle's run: a test binary (kind "test") or a tool
// (kind "tool", commbench), as tests.txt and commbench.txt frame them:
//
//	### step <kind> <name>
//	...its output: a test binary's as cmd/test2json's events, a tool's as it printed it...
//	### end <name> exit=<status> seconds=<s> limit=<s>
//	### notrun <name> -- <why>
type step struct {
	kind, name string
	*block
	ended   bool
	exit    int
	seconds int
	limit   int
	notRun  string // why the step did not run
}

var (
	stepLine   = regexp.MustCompile(`^### step (\S+) (.+)$`)
	endLine    = regexp.MustCompile(`^### end (.+) exit=(\d+) seconds=(\d+) limit=(\d+)$`)
	notRunLine = regexp.MustCompile(`^### notrun (.+?) -- (.*)$`)
)

// parseSteps reads the steps framed in r. Within a step, a line that is a test2json
// event counts as one; any other line is output (a tool's, or a message around the test
// binary such as timeout(1)'s).
func parseSteps(r io.Reader) ([]*step, error) {
	var out []*step
	var cur *step
	var p *pkgEvents
	done := func() {
		if p != nil {
			p.finish()
		}
		cur, p = nil, nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		l := sc.Text()
		switch m := stepLine.FindStringSubmatch(l); {
		case m != nil:
			done()
			p = newPkgEvents(m[2])
			cur = &step{kind: m[1], name: m[2], block: p.b}
			out = append(out, cur)
		case endLine.MatchString(l) && cur != nil:
			e := endLine.FindStringSubmatch(l)
			cur.ended = true
			cur.exit, _ = strconv.Atoi(e[2])
			cur.seconds, _ = strconv.Atoi(e[3])
			cur.limit, _ = strconv.Atoi(e[4])
			done()
		case notRunLine.MatchString(l):
			e := notRunLine.FindStringSubmatch(l)
			out = append(out, &step{name: e[1], notRun: e[2], block: &block{name: e[1]}})
		case p != nil:
			if e, ok := parseEvent(l); ok {
				p.add(e, nil)
			} else {
				p.line(l)
			}
		}
	}
	done()
	return out, sc.Err()
}

// status judges a step: ok only when it ran to its end with exit status 0 and passed at
// least one test (a tool: exit status 0); a step whose only results are skips is
// "skipped", one that matched no test "none".
func (s *step) status() string {
	pass, _ := s.count("PASS")
	skip, _ := s.count("SKIP")
	fail, _ := s.count("FAIL")
	switch {
	case s.notRun != "":
		return "not run"
	case !s.ended:
		return "interrupted"
	case s.exit == 124 || s.exit == 137 || s.timedOut:
		return "timeout"
	case s.exit != 0 || fail > 0:
		return fmt.Sprintf("FAIL(%d)", s.exit)
	case s.kind != "test":
		return "ok"
	case pass == 0 && skip > 0:
		return "skipped"
	case pass == 0 && len(s.benchmarks) == 0:
		return "none"
	}
	return "ok"
}

// env reads env.txt's "key: value" lines.
func readEnv(path string) (map[string]string, error) {
	env := map[string]string{}
	data, err := os.ReadFile(path)
	if err != nil {
		return env, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok && !strings.Contains(k, " ") {
			if _, seen := env[k]; !seen {
				env[k] = strings.TrimSpace(v)
			}
		}
	}
	return env, nil
}

// A target is a performance goal judged from one benchmark's metric.
type target struct {
	what, measured, verdict string
}

// findBench returns the last result line of the benchmark named name.
func findBench(steps []*step, name string) string {
	var found string
	for _, s := range steps {
		for _, l := range s.benchmarks {
			if benchBase(l) == name {
				found = l
			}
		}
	}
	return found
}

func judgeRatio(steps []*step, what, bench, unit string, ok func(float64) bool) target {
	t := target{what: what, measured: "not measured", verdict: "not measured"}
	line := findBench(steps, bench)
	if line == "" {
		t.measured = bench + " did not run"
		return t
	}
	v, found := metric(line, unit)
	if !found {
		t.measured = bench + " printed no " + unit
		return t
	}
	t.measured = fmt.Sprintf("%s %.3f", unit, v)
	t.verdict = "FAIL"
	if ok(v) {
		t.verdict = "PASS"
	}
	return t
}

// crossoverBench is the two-rank path's benchmark: one sub-benchmark per size in bytes
// ("<bytes>B"), each reporting path/nccl, the path's time over ncclAllReduce's.
const crossoverBench = "BenchmarkGPUTwoRankPathVsNCCL"

// judgeCrossover finds the largest size up to which the two-rank path beats
// ncclAllReduce at every measured size, and whether comm.DefaultTwoRankThreshold (1 MiB)
// is within a factor of two of it.
func judgeCrossover(steps []*step) target {
	t := target{what: "two-rank path vs ncclAllReduce, 4 KiB to 64 MiB: measured threshold within a factor of 2 of the 1 MiB default",
		measured: crossoverBench + " did not run", verdict: "not measured"}
	type point struct {
		bytes int
		ratio float64
	}
	var pts []point
	for _, s := range steps {
		for _, l := range s.benchmarks {
			base := benchBase(l)
			size, ok := strings.CutPrefix(base, crossoverBench+"/")
			if !ok {
				continue
			}
			n, err := strconv.Atoi(strings.TrimSuffix(size, "B"))
			v, found := metric(l, "path/nccl")
			if err == nil && found {
				pts = append(pts, point{n, v})
			}
		}
	}
	if len(pts) == 0 {
		return t
	}
	slices.SortStableFunc(pts, func(a, b point) int { return a.bytes - b.bytes })
	threshold := 0
	var ratios []string
	for _, p := range pts {
		ratios = append(ratios, fmt.Sprintf("%s %.2f", size(p.bytes), p.ratio))
	}
	for _, p := range pts {
		if p.ratio >= 1 {
			break
		}
		threshold = p.bytes
	}
	const def = 1 << 20
	t.measured = "path/nccl " + strings.Join(ratios, ", ") + "; path faster up to " + size(threshold)
	switch {
	case threshold == 0:
		t.measured = "path/nccl " + strings.Join(ratios, ", ") + "; the path is never faster"
		t.verdict = "FAIL (the 1 MiB default is wrong here: ncclAllReduce wins at every size)"
	case threshold >= def/2 && threshold <= 2*def:
		t.verdict = "PASS (the 1 MiB default is right within a factor of 2)"
	default:
		t.verdict = "FAIL (the measured threshold is " + size(threshold) + ", not about 1 MiB)"
	}
	return t
}

// size formats bytes as B, KiB, MiB.
func size(b int) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return strconv.Itoa(b>>20) + " MiB"
	case b >= 1<<10 && b%(1<<10) == 0:
		return strconv.Itoa(b>>10) + " KiB"
	}
	return strconv.Itoa(b) + " B"
}

func targets(steps []*step) []target {
	return []target{
		judgeRatio(steps, "kernels: bf16 add bandwidth >= 0.85 of a device-to-device copy of the same size",
			"BenchmarkGPUAddBF16VersusCopy", "add/copy", func(v float64) bool { return v >= 0.85 }),
		judgeRatio(steps, "comm: 8-byte all-reduce <= 1.05 x raw ncclAllReduce + cuStreamSynchronize, measured alternately",
			"BenchmarkGPUAllReduceCommVsRaw/8B", "comm/raw", func(v float64) bool { return v <= 1.05 }),
		judgeCrossover(steps),
	}
}

// gpuRecord writes dir/summary.txt and dir/record.md from dir's results and reports
// whether the run passed: every step ok, no target failed.
func gpuRecord(dir string, stdout io.Writer) (bool, error) {
	env, err := readEnv(filepath.Join(dir, "env.txt"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	var steps []*step
	for _, f := range []string{"tests.txt", "commbench.txt"} {
		fh, err := os.Open(filepath.Join(dir, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, err
		}
		s, err := parseSteps(fh)
		fh.Close()
		if err != nil {
			return false, fmt.Errorf("reading %s: %w", f, err)
		}
		steps = append(steps, s...)
	}
	tg := targets(steps)
	passed := len(steps) > 0
	for _, s := range steps {
		if s.status() != "ok" {
			passed = false
		}
	}
	for _, t := range tg {
		if strings.HasPrefix(t.verdict, "FAIL") {
			passed = false
		}
	}
	if env["interrupted"] != "" {
		passed = false
	}
	var sum strings.Builder
	writeSummary(&sum, env, steps, tg, passed)
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(sum.String()), 0o644); err != nil {
		return false, err
	}
	var rec strings.Builder
	writeRecord(&rec, env, steps, tg, passed, dir)
	if err := os.WriteFile(filepath.Join(dir, "record.md"), []byte(rec.String()), 0o644); err != nil {
		return false, err
	}
	_, err = io.WriteString(stdout, sum.String())
	return passed, err
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func verdict(passed bool, env map[string]string) string {
	switch {
	case env["interrupted"] != "":
		return "FAIL: the run was interrupted (" + env["interrupted"] + "); the steps below are what it finished"
	case passed:
		return "PASS: every step ok, no target failed"
	}
	return "FAIL: not every step is ok or a target failed (details below)"
}

func stepLineText(s *step) string {
	pass, _ := s.count("PASS")
	fail, _ := s.count("FAIL")
	skip, _ := s.count("SKIP")
	return fmt.Sprintf("%-11s %-30s %4d passed %3d failed %3d skipped  %s", s.status(), s.name, pass, fail, skip, stepDetail(s))
}

// stepDetail says how a step ended.
func stepDetail(s *step) string {
	_, ptop := s.count("PASS")
	_, ftop := s.count("FAIL")
	_, stop := s.count("SKIP")
	extra := ""
	switch {
	case s.notRun != "":
		extra = s.notRun
	case !s.ended:
		extra = "no end: the run stopped during this step"
	case s.kind == "test":
		extra = fmt.Sprintf("exit %d after %ds of %ds; top-level %d passed %d failed %d skipped", s.exit, s.seconds, s.limit, ptop, ftop, stop)
	default:
		extra = fmt.Sprintf("exit %d after %ds of %ds", s.exit, s.seconds, s.limit)
	}
	return extra
}

func writeSummary(w io.Writer, env map[string]string, steps []*step, tg []target, passed bool) {
	fmt.Fprintf(w, "GPU: %s, driver %s\n", or(env["gpu"], "none found by nvidia-smi"), or(env["driver"], "unknown"))
	fmt.Fprintf(w, "verdict: %s\n", verdict(passed, env))
	fmt.Fprintf(w, "multi-rank: %s\n\n", or(env["multi-rank"], "not recorded"))
	fmt.Fprintln(w, "steps (counts include subtests and benchmarks):")
	for _, s := range steps {
		fmt.Fprintln(w, "  "+stepLineText(s))
	}
	fmt.Fprintln(w, "\ntargets:")
	for _, t := range tg {
		fmt.Fprintf(w, "  %s\n      %s: %s\n", t.verdict, t.what, t.measured)
	}
	n := 0
	for _, s := range steps {
		c, _ := s.count("SKIP")
		n += c
	}
	fmt.Fprintf(w, "\nskips: %d (listed in record.md)\n\nbenchmarks:\n", n)
	any := false
	for _, s := range steps {
		for _, l := range s.benchmarks {
			fmt.Fprintf(w, "  %s\n", l)
			any = true
		}
	}
	if !any {
		fmt.Fprintln(w, "  (none ran)")
	}
}

// row is the table row for docs/gpu-results.md: per test step its status and top-level
// tests passed / run; benchmark lines and tools are not packages and are not counted.
func row(env map[string]string, steps []*step) string {
	var cells []string
	for _, s := range steps {
		if s.kind == "tool" {
			continue
		}
		_, p := s.count("PASS")
		_, f := s.count("FAIL")
		_, k := s.count("SKIP")
		cells = append(cells, fmt.Sprintf("%s %s %d/%d", s.name, s.status(), p, p+f+k))
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |", or(env["date"], "?")[:min(10, len(or(env["date"], "?")))],
		or(env["gpu"], "none"), or(env["driver"], "-"), or(env["cuda"], "-"), or(env["nccl"], "-"), or(env["commit"], "?"), strings.Join(cells, ", "))
}

func writeRecord(w io.Writer, env map[string]string, steps []*step, tg []target, passed bool, dir string) {
	fmt.Fprintf(w, "### %s %s, %s\n\n", or(env["date"], "?"), or(env["gpu"], "no GPU"), or(env["nccl"], "no NCCL loaded"))
	fmt.Fprintf(w, "**%s**\n\n", verdict(passed, env))
	fmt.Fprintln(w, "Row for the table:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| date | GPU | driver | CUDA | NCCL | commit | tests passed |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- |")
	fmt.Fprintln(w, row(env, steps))
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Libraries: libcuda %s; libnccl %s.\n\n", or(env["libcuda"], "not recorded"), or(env["libnccl"], "not recorded"))
	fmt.Fprintf(w, "Several ranks on one GPU: %s\n\n", or(env["multi-rank"], "not recorded"))

	fmt.Fprintln(w, "#### Steps")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Counts include subtests and benchmarks. A step is ok only when it ended with exit status 0 and passed something; one whose only results are skips is `skipped`.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| step | status | passed | failed | skipped | detail |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- |")
	for _, s := range steps {
		pass, _ := s.count("PASS")
		fail, _ := s.count("FAIL")
		skip, _ := s.count("SKIP")
		fmt.Fprintf(w, "| `%s` | %s | %d | %d | %d | %s |\n", s.name, s.status(), pass, fail, skip, stepDetail(s))
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "#### Targets")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | measured | verdict |")
	fmt.Fprintln(w, "| --- | --- | --- |")
	for _, t := range tg {
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.what, t.measured, t.verdict)
	}
	fmt.Fprintln(w)

	var skips, fails []string
	for _, s := range steps {
		for _, r := range s.results {
			switch r.action {
			case "SKIP":
				skips = append(skips, fmt.Sprintf("- `%s` %s: %s", s.name, r.name, r.reasonIn(s.results)))
			case "FAIL":
				fails = append(fails, fmt.Sprintf("- `%s` %s: %s", s.name, r.name, r.reasonIn(s.results)))
			}
		}
	}
	fmt.Fprintf(w, "#### Skips (%d)\n\n", len(skips))
	if len(skips) == 0 {
		fmt.Fprintln(w, "none")
	}
	for _, l := range skips {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintf(w, "\n#### Failures (%d)\n\n", len(fails))
	if len(fails) == 0 {
		fmt.Fprintln(w, "none")
	}
	for _, l := range fails {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, "\n#### Benchmarks\n\n```text")
	any := false
	for _, s := range steps {
		for _, l := range s.benchmarks {
			fmt.Fprintln(w, l)
			any = true
		}
	}
	if !any {
		fmt.Fprintln(w, "(none ran)")
	}
	fmt.Fprintln(w, "```")
	if data, err := os.ReadFile(filepath.Join(dir, "commbench.txt")); err == nil {
		fmt.Fprintln(w, "\n#### commbench\n\n```text")
		for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
			if !strings.HasPrefix(l, "### ") {
				fmt.Fprintln(w, l)
			}
		}
		fmt.Fprintln(w, "```")
	}
	if data, err := os.ReadFile(filepath.Join(dir, "env.txt")); err == nil {
		fmt.Fprintf(w, "\n#### Environment (env.txt)\n\n```text\n%s```\n", data)
	}
}
