// Package readmetest holds the test that keeps README.md honest: every Go code block in
// it is compiled, programs with an "// Output:" comment are run and their output
// compared, test files are run with go test, and every make target and tool the README
// names must exist.
package readmetest
