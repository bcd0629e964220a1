package dl

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResolveIsInlinable guards the fast path: every generated call starts with Resolve,
// so it must inline into the caller (one atomic load, no call).
func TestResolveIsInlinable(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the package")
	}
	// go test puts the go command that runs it first on PATH.
	goBin, err := exec.LookPath("go")
	require.NoError(t, err)
	out, err := exec.Command(goBin, "build", "-gcflags=-m", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.True(t, strings.Contains(string(out), "can inline (*Library).Resolve"), "compiler says:\n%s", out)
}
