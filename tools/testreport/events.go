package main

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"
)

// An event is one line of `go test -json`, or of cmd/test2json reading a test binary run
// with -test.v=test2json (the GPU bundle's steps).
type event struct {
	Action      string // start, run, pause, cont, output, pass, fail, skip, bench, build-output, build-fail
	Package     string // the package under test (empty for build events)
	Test        string // the test, subtest or benchmark; empty for the package itself
	Output      string // what was printed (action output, build-output); may be part of a line
	ImportPath  string // the package being built (build-output, build-fail)
	FailedBuild string // on a package's fail: the import path whose build failed
}

// parseEvent reads line as an event; ok is false for a line that is not one.
func parseEvent(line string) (e event, ok bool) {
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil || e.Action == "" {
		return event{}, false
	}
	return e, true
}

// pkgEvents gathers one test binary's events (one package) into a block.
type pkgEvents struct {
	b      *block
	text   strings.Builder             // everything printed, in order
	output map[string]*strings.Builder // what each test printed, until its result
	end    string                      // the package's own final action (pass, fail, skip), once it came
}

func newPkgEvents(name string) *pkgEvents {
	return &pkgEvents{b: &block{name: name}, output: map[string]*strings.Builder{}}
}

// add takes one event of the package; build is the build output per import path, for a
// package whose build failed.
func (p *pkgEvents) add(e event, build map[string][]string) {
	switch e.Action {
	case "output":
		p.text.WriteString(e.Output)
		if e.Test != "" {
			o := p.output[e.Test]
			if o == nil {
				o = &strings.Builder{}
				p.output[e.Test] = o
			}
			o.WriteString(e.Output)
		}
	case "pass", "fail", "skip":
		if e.Test != "" {
			p.b.results = append(p.b.results, result{name: e.Test, action: strings.ToUpper(e.Action), output: ownOutput(e.Test, e.Action, p.output[e.Test])})
			delete(p.output, e.Test)
			return
		}
		p.end = e.Action
		p.b.failLine = e.Action == "fail"
		if e.FailedBuild != "" {
			p.b.lines = append(p.b.lines, build[e.FailedBuild]...)
		}
	}
}

// line adds a line that is not an event (printed around the test binary) as output.
func (p *pkgEvents) line(l string) { p.text.WriteString(l + "\n") }

// finish completes the block: its lines, benchmark result lines, whether the binary's
// -test.timeout fired, and go test's closing line once the package's final event came.
func (p *pkgEvents) finish() *block {
	if text := strings.TrimSuffix(p.text.String(), "\n"); text != "" {
		p.b.lines = append(p.b.lines, strings.Split(text, "\n")...)
	}
	for _, l := range p.b.lines {
		if benchResult.MatchString(l) {
			p.b.benchmarks = append(p.b.benchmarks, l)
		}
		if strings.HasPrefix(l, "panic: test timed out after") {
			p.b.timedOut = true
		}
	}
	if p.end != "" {
		p.b.closing = closingOf(p.b, p.end)
	}
	return p.b
}

// goTestReport is what `go test -json` said: one block per package, in the order the
// packages started, and the lines that were not events (the go command's or a wrapper's
// own messages), in order.
type goTestReport struct {
	blocks []*block
	other  []string
}

// parseGoTestJSON reads `go test -json` output. A package whose events end before its
// own pass, fail or skip event (the go command or the stream was cut short) gets a
// block without closing line: the caller reports it as failed.
func parseGoTestJSON(r io.Reader) (goTestReport, error) {
	var rep goTestReport
	pkgs := map[string]*pkgEvents{}
	var order []*pkgEvents
	build := map[string][]string{} // build output per import path ("p [p.test]")
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		e, ok := parseEvent(sc.Text())
		switch {
		case !ok:
			rep.other = append(rep.other, sc.Text())
		case e.Action == "build-output":
			build[e.ImportPath] = append(build[e.ImportPath], strings.TrimSuffix(e.Output, "\n"))
		case e.Action == "build-fail":
		case e.Package == "":
			rep.other = append(rep.other, sc.Text())
		default:
			p := pkgs[e.Package]
			if p == nil {
				p = newPkgEvents(e.Package)
				pkgs[e.Package] = p
				order = append(order, p)
			}
			p.add(e, build)
		}
	}
	for _, p := range order {
		rep.blocks = append(rep.blocks, p.finish())
	}
	return rep, sc.Err()
}

// ownOutput is what test printed itself (t.Log, t.Skip's and t.Error's messages), as
// indented lines: not the === RUN lines, a benchmark's name line, or its own --- result
// line (an indented --- line of another name is output, a child process's results).
func ownOutput(test, action string, o *strings.Builder) []string {
	if o == nil {
		return nil
	}
	own := "--- " + strings.ToUpper(action) + ": " + test
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(o.String(), "\n"), "\n") {
		if !strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "\t") {
			continue
		}
		if t := strings.TrimSpace(l); t == own || strings.HasPrefix(t, own+" ") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// closingOf is go test's own closing line for the package, the last of its lines that
// starts as the package's final action's does (ok, FAIL, ?); where it printed none, one
// made of the action.
func closingOf(b *block, action string) string {
	prefix := map[string]string{"pass": "ok  \t", "fail": "FAIL\t", "skip": "?   \t"}[action] + b.name
	for i := len(b.lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(b.lines[i], prefix) {
			return b.lines[i]
		}
	}
	return prefix
}
