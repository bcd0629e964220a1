//go:build !race

package job

// buildFlags are the go build flags of the programs the tests build and run (the
// torchrun ranks): the test binary's own race setting, so that their packages come from
// the build cache the test binary's build filled instead of being compiled again.
var buildFlags []string
