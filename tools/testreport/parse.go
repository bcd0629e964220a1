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
	failLine   bool     // the package's own fail event: the binary reported failure
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
	benchResult = regexp.MustCompile(`^Benchmark\S*\s+\d+\s+\S+ \S+`)
	fileLine    = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)
)

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
