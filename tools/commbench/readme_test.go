package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeCommandLinesRun: every commbench command line of docs/performance.md parses, and
// those on the simulator run (with -n 1 -w 0 appended to keep them short: later flags
// win) with every result right.
func TestReadmeCommandLinesRun(t *testing.T) {
	md, err := os.ReadFile("../../docs/performance.md")
	require.NoError(t, err)
	// A command line: up to a backquote, a comment or the end of the line.
	re := regexp.MustCompile("go run \\./tools/commbench([^`#\\n]*)")
	n := 0
	for _, m := range re.FindAllStringSubmatch(string(md), -1) {
		args := strings.Fields(m[1])
		n++
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cfg, err := parseArgs(args, &strings.Builder{})
			require.NoError(t, err)
			if cfg.sim == 0 {
				return // GPUs: make gpu-bundle runs them
			}
			out, errOut, code := runCommbench(t, openWorld, append(args, "-n", "1", "-w", "0")...)
			require.Equal(t, 0, code, errOut)
			assert.NotContains(t, out, "FAILED")
		})
	}
	assert.GreaterOrEqual(t, n, 3, "docs/performance.md's commbench command lines")
}
