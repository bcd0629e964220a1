package job

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ncclgo/ncclgo/comm/internal/torchtest"
)

// readmeConnect builds the README's Connect program ("Quick start on GPUs") into a
// directory under /tmp (which the torch 2.x roots share) and returns the binary.
func readmeConnect(t *testing.T) string {
	t.Helper()
	root := torchtest.RepoRoot()
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(md), "## Quick start on GPUs")
	if !ok {
		t.Fatal(`README.md has no "## Quick start on GPUs" section`)
	}
	_, after, ok = strings.Cut(after, "```go\n")
	code, _, ok2 := strings.Cut(after, "```\n")
	if !ok || !ok2 || !strings.Contains(code, "job.Connect(") {
		t.Fatal("README.md's \"Quick start on GPUs\" has no go block calling job.Connect")
	}
	// Built inside the module (testdata is not a package of ./...), run from /tmp.
	src, err := os.MkdirTemp(filepath.Join(root, "comm", "job", "testdata"), "readme-connect-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(src) })
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.MkdirTemp("/tmp", "ncclgo-readme-connect-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(out) })
	bin := filepath.Join(out, "engine")
	cmd := exec.Command("go", append(append([]string{"build"}, buildFlags...), "-o", bin, ".")...)
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build README's Connect program: %v\n%s", err, b)
	}
	return bin
}

// The README's Connect program, launched by torchrun (1.13 with static rendezvous, 2.6
// with c10d, 2.14 with static; 2 ranks): the ranks join the job through the launcher's store and
// get to their GPU. On a machine without one a rank stops there with the error the
// README shows ("init on rank R: open device R: ..."), and torchrun then stops the
// other, which may not have got as far: so at least one rank must get to its device
// and no rank may fail before it; with GPUs, every rank prints "rank R of 2 ready".
func TestTorchrunLaunchesReadmeConnect(t *testing.T) {
	bin := readmeConnect(t)
	// A line the program logs: log's date and time, then the message.
	logLine := regexp.MustCompile(`(?m)^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (.*)$`)
	reached := regexp.MustCompile(`^(init on rank (\d+): open device (\d+): .*|rank (\d+) of 2 ready)$`)
	for i, name := range torchtest.Names() {
		t.Run(name, func(t *testing.T) {
			env := torchtest.Require(t, name)
			dir := torchtest.Stage(t, filepath.Join("testdata", "torchrun_launch.py"))
			// One rendezvous backend per torch, taking turns (TestTorchrunLaunchesGoRanks
			// runs both on each): every launch starts torch's python.
			for _, backend := range []string{[]string{"static", "c10d"}[i%2]} {
				t.Run(backend, func(t *testing.T) {
					out := launchTolerant(t, env, dir, backend, bin)
					ranks := map[string]bool{}
					ready := 0
					for _, m := range logLine.FindAllStringSubmatch(out, -1) {
						msg := m[1]
						switch r := reached.FindStringSubmatch(msg); {
						case r != nil && r[4] != "":
							ready++
							ranks[r[4]] = true
						case r != nil:
							if r[2] != r[3] {
								t.Errorf("rank %s opened device %s, not its LOCAL_RANK's", r[2], r[3])
							}
							ranks[r[2]] = true
						case strings.HasPrefix(msg, "INFO "):
						default:
							t.Errorf("a rank failed before its device: %s", msg)
						}
					}
					if len(ranks) == 0 || ready > 0 && ready != 2 {
						t.Errorf("ranks that got to their device: %v (%d ready)", ranks, ready)
					}
					if t.Failed() {
						t.Logf("torch %s, %s rendezvous, launcher output:\n%s", env.Version, backend, out)
					}
				})
			}
		})
	}
}

// launchTolerant runs torchrun_launch.py with 2 ranks of bin and returns its output;
// the ranks may fail (no GPU), the launch itself may not be cut short.
func launchTolerant(t *testing.T, env torchtest.Env, dir, backend, bin string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for try := 1; ; try++ {
		cmd := env.Command(ctx, filepath.Join(dir, "torchrun_launch.py"), "2", backend, strconv.Itoa(freePort(t)), "0", bin)
		out, _ := cmd.CombinedOutput()
		if try < 3 && bytes.Contains(out, []byte("ddress already in use")) {
			t.Logf("torchrun attempt %d: its port was taken, trying another:\n%s", try, out)
			continue
		}
		if ctx.Err() != nil {
			t.Fatalf("torchrun of README's Connect program, torch %s, %s: timed out\n%s", env.Version, backend, out)
		}
		return string(out)
	}
}
