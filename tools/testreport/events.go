package main

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"
)

// An event is one line of `go test -json`: the go command's cmd/test2json events.
type event struct {
	Action      string // start, run, pause, cont, output, pass, fail, skip, bench, build-output, build-fail
	Package     string // the package under test (empty for build events)
	Test        string // the test, subtest or benchmark; empty for the package itself
	Output      string // what was printed (action output, build-output); may be part of a line
	ImportPath  string // the package being built (build-output, build-fail)
	FailedBuild string // on a package's fail: the import path whose build failed
}

// pkgEvents gathers one package's events into a block.
type pkgEvents struct {
	b      *block
	text   strings.Builder             // everything printed for the package, in order
	output map[string]*strings.Builder // what each test printed
	end    string                      // the package's own final action (pass, fail, skip), once it came
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
	get := func(name string) *pkgEvents {
		p := pkgs[name]
		if p == nil {
			p = &pkgEvents{b: &block{name: name}, output: map[string]*strings.Builder{}}
			pkgs[name] = p
			order = append(order, p)
		}
		return p
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		var e event
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil || e.Action == "" {
			rep.other = append(rep.other, line)
			continue
		}
		switch e.Action {
		case "build-output":
			build[e.ImportPath] = append(build[e.ImportPath], strings.TrimSuffix(e.Output, "\n"))
			continue
		case "build-fail":
			continue
		}
		if e.Package == "" {
			rep.other = append(rep.other, line)
			continue
		}
		p := get(e.Package)
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
				continue
			}
			p.end = e.Action
			p.b.failLine = e.Action == "fail"
			if e.FailedBuild != "" {
				p.b.lines = append(p.b.lines, build[e.FailedBuild]...)
			}
		}
	}
	for _, p := range order {
		text := strings.TrimSuffix(p.text.String(), "\n")
		if text != "" {
			p.b.lines = append(p.b.lines, strings.Split(text, "\n")...)
		}
		for _, l := range p.b.lines {
			if benchResult.MatchString(l) {
				p.b.benchmarks = append(p.b.benchmarks, l)
			}
		}
		if p.end != "" {
			p.b.closing = closingOf(p.b, p.end)
		}
		rep.blocks = append(rep.blocks, p.b)
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
