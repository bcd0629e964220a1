package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunPassesTheCommandsStatusAndOutput(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"-procs", "2", "--", "sh", "-c", "echo hi; echo oops >&2; exit 7"}, strings.NewReader(""), &out, &errOut)
	assert.Equal(t, 7, code)
	assert.Equal(t, "hi\n", out.String())
	assert.Contains(t, errOut.String(), "oops\n")
	assert.Contains(t, errOut.String(), "cpuload: 2 threads spun")
}

func TestRunBadCommandLines(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "no command to run"},
		{[]string{"-procs", "-1", "--", "true"}, 2, "-procs -1: the thread count is negative"},
		{[]string{"--", filepath.Join(t.TempDir(), "absent")}, 1, "starting"},
	} {
		var out, errOut bytes.Buffer
		assert.Equal(t, tc.code, run(tc.args, strings.NewReader(""), &out, &errOut), tc.args)
		assert.Contains(t, errOut.String(), tc.msg)
	}
}

// TestLoadIsReal checks that the spinning threads take CPU time: this process's CPU time,
// as /proc counts it, grows while the test goroutine only sleeps.
func TestLoadIsReal(t *testing.T) {
	stop := spin(1)
	start := cpuTicks(t)
	deadline := time.Now().Add(time.Minute)
	for cpuTicks(t)-start < 20 { // 0.2 s of CPU at 100 ticks per second
		require.True(t, time.Now().Before(deadline), "one spinning thread used under 20 ticks of CPU in a minute")
		time.Sleep(10 * time.Millisecond)
	}
	assert.Positive(t, stop())
}

// cpuTicks is this process's user+system CPU time in clock ticks (/proc/self/stat).
func cpuTicks(t *testing.T) int {
	t.Helper()
	stat, err := os.ReadFile("/proc/self/stat")
	require.NoError(t, err)
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	require.Greater(t, len(f), 12)
	u, err := strconv.Atoi(f[11])
	require.NoError(t, err)
	s, err := strconv.Atoi(f[12])
	require.NoError(t, err)
	return u + s
}
