package rendezvous

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/testenv"
)

// The tests that measure what a server process really holds run tools/rendezvous, built
// without the race detector, as a process of its own, and read its resident size from
// /proc.

var tool struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func removeTool() {
	if tool.dir != "" {
		_ = os.RemoveAll(tool.dir)
	}
}

// toolBinary builds tools/rendezvous once per test run.
func toolBinary(t testing.TB) string {
	t.Helper()
	tool.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			tool.err = fmt.Errorf("the go command is not in PATH (install Go, https://go.dev/dl/): %w", err)
			return
		}
		if tool.dir, tool.err = os.MkdirTemp("", "ncclgo-rdzv-tool-"); tool.err != nil {
			return
		}
		tool.path = filepath.Join(tool.dir, "rendezvous")
		out, err := exec.Command(goTool, "build", "-o", tool.path, "github.com/ncclgo/ncclgo/tools/rendezvous").CombinedOutput()
		if err != nil {
			tool.err = fmt.Errorf("go build ./tools/rendezvous: %w\n%s", err, out)
		}
	})
	if tool.err != nil {
		if os.Getenv("NCCLGO_STRICT") != "" {
			t.Fatalf("%v", tool.err)
		}
		t.Skipf("%v", tool.err)
	}
	return tool.path
}

// serverProc is a tools/rendezvous process on loopback.
type serverProc struct {
	t    testing.TB
	cmd  *exec.Cmd
	addr string
	logs *logBuffer
}

var listeningRE = regexp.MustCompile(`rendezvous server listening"? addr=(\S+)`)

// startServerProc starts tools/rendezvous with the token and flags; it is killed at
// cleanup.
func startServerProc(t testing.TB, token string, args ...string) *serverProc {
	t.Helper()
	exe := toolBinary(t)
	cmd := exec.Command(exe, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(testenv.Environ(), EnvToken+"="+token)
	p := &serverProc{t: t, cmd: cmd, logs: &logBuffer{}}
	cmd.Stderr = p.logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			logs := p.logs.String()
			t.Logf("server log (last 4 KiB):\n%s", logs[max(0, len(logs)-4096):])
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := listeningRE.FindStringSubmatch(p.logs.String()); m != nil {
			p.addr = m[1]
			return p
		}
		require.True(t, time.Now().Before(deadline), "the server did not start: %s", p.logs.String())
		time.Sleep(10 * time.Millisecond)
	}
}

// memory returns the process's resident size now and its peak (VmRSS, VmHWM).
func (p *serverProc) memory() (rss, peak int64) {
	p.t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	require.NoError(p.t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			rss = n << 10
		case "VmHWM:":
			peak = n << 10
		}
	}
	return rss, peak
}

func (p *serverProc) signal(sig syscall.Signal) {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(sig))
}
