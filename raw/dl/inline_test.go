package dl

import (
	"os/exec"
	"path/filepath"
	"runtime"
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
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goBin, "build", "-gcflags=-m", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.True(t, strings.Contains(string(out), "can inline (*Library).Resolve"), "compiler says:\n%s", out)
}
