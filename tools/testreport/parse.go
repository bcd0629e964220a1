package main

import (
	"regexp"
	"strconv"
	"strings"
)

// A result is one test, subtest or benchmark that ended with a --- PASS, FAIL or SKIP line.
type result struct {
	name   string   // TestX/sub
	action string   // PASS, FAIL, SKIP
	output []string // what it printed (t.Log, t.Skip's reason, failures), indentation removed
}

// topLevel reports whether r is a top-level test or benchmark (no subtest path).
func (r result) topLevel() bool { return !strings.Contains(r.name, "/") }

// reasonIn is the skip (or failure) reason: the output the test printed, its file:line
// prefix removed, on one line, at most 300 characters; for a test that printed nothing,
// whether its subtests (among all) ended the same way.
func (r result) reasonIn(all []result) string {
	var parts []string
	for _, l := range r.output {
		l = strings.TrimSpace(fileLine.ReplaceAllString(l, ""))
		if l != "" {
			parts = append(parts, l)
		}
	}
	s := strings.Join(parts, " / ")
	if s == "" {
		s = "(no reason given)"
		verb := map[string]string{"SKIP": "skipped", "FAIL": "failed", "PASS": "passed"}[r.action]
		for _, o := range all {
			if strings.HasPrefix(o.name, r.name+"/") && o.action == r.action {
				s = "(nothing printed of its own: its subtests " + verb + ")"
			}
		}
	}
	if len(s) > 300 {
		s = s[:297] + "..."
	}
	return s
}

// A block is the output of one test binary run: one package of `go test -json`, or
// one step of the GPU bundle's run.
type block struct {
	name       string
	results    []result
	benchmarks []string // benchmark result lines (BenchmarkX-16  100  12 ns/op ...)
	lines      []string // every line, as read
	closing    string   // go test's own closing line (ok, FAIL, ?), if any
	timedOut   bool     // the binary's -test.timeout fired
	failLine   bool     // a bare FAIL line, or go test's fail event for the package
}

// count returns how many results have action, and how many of them are top-level.
func (b *block) count(action string) (all, top int) {
	for _, r := range b.results {
		if r.action == action {
			all++
			if r.topLevel() {
				top++
			}
		}
	}
	return all, top
}

var (
	runLine     = regexp.MustCompile(`^=== (?:RUN|CONT|NAME)\s+(\S+)`)
	resultLine  = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+)`)
	benchName   = regexp.MustCompile(`^(Benchmark\S*)$`)
	benchResult = regexp.MustCompile(`^Benchmark\S*\s+\d+\s+\S+ \S+`)
	fileLine    = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)
	closingLine = regexp.MustCompile(`^(ok  |FAIL|\?   )\t(\S+)`)
)

// parser turns verbose test output into results, attributing each output line to the
// test that was running when it was printed (what === RUN, CONT and NAME lines and a
// benchmark's name line say), as cmd/test2json does.
type parser struct {
	cur    string
	output map[string][]string
	b      *block
}

func newParser(name string) *parser {
	return &parser{output: map[string][]string{}, b: &block{name: name}}
}

func (p *parser) line(l string) {
	p.b.lines = append(p.b.lines, l)
	switch {
	case runLine.MatchString(l):
		p.cur = runLine.FindStringSubmatch(l)[1]
	case strings.HasPrefix(l, "=== PAUSE"):
	case isResult(l):
		m := resultLine.FindStringSubmatch(l)
		p.b.results = append(p.b.results, result{name: m[2], action: m[1], output: p.output[m[2]]})
		delete(p.output, m[2])
	case benchName.MatchString(l):
		p.cur = l
	case benchResult.MatchString(l):
		p.b.benchmarks = append(p.b.benchmarks, l)
	case strings.HasPrefix(l, "panic: test timed out after"):
		p.b.timedOut = true
	case l == "FAIL":
		p.b.failLine = true
	case closingLine.MatchString(l):
		p.b.closing = l
	case p.cur != "" && (strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t")):
		p.output[p.cur] = append(p.output[p.cur], l)
	}
}

// isResult reports whether l is a --- PASS, FAIL or SKIP line of the binary itself: its
// indentation is 4 spaces per subtest level of the name. The same text further indented
// is output a test printed (a child test process's results, logged by its parent).
func isResult(l string) bool {
	m := resultLine.FindStringSubmatch(l)
	if m == nil {
		return false
	}
	indent := len(l) - len(strings.TrimLeft(l, " "))
	return indent == 4*strings.Count(m[2], "/")
}

// metric returns the value reported for unit on a benchmark result line, if any.
func metric(line, unit string) (float64, bool) {
	f := strings.Fields(line)
	for i := 1; i+1 < len(f); i++ {
		if f[i+1] == unit {
			v, err := strconv.ParseFloat(f[i], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// benchBase is the benchmark's name without the -GOMAXPROCS suffix.
func benchBase(line string) string {
	name, _, _ := strings.Cut(line, "\t")
	name = strings.Fields(name)[0]
	if i := strings.LastIndex(name, "-"); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}
