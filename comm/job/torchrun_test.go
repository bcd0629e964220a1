package job

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncclgo/ncclgo/comm/internal/torchtest"
	"github.com/ncclgo/ncclgo/internal/testenv"
)

var (
	torchrankOnce sync.Once
	torchrankBin  string
	torchrankErr  error
)

// buildTorchrank builds testdata/torchrank once into a directory under /tmp (which the
// torch2 root shares).
func buildTorchrank(t *testing.T) string {
	t.Helper()
	torchrankOnce.Do(func() {
		dir, err := os.MkdirTemp("/tmp", "ncclgo-torchrank-")
		if err != nil {
			torchrankErr = err
			return
		}
		torchrankBin = filepath.Join(dir, "torchrank")
		out, err := exec.Command("go", append(append([]string{"build"}, buildFlags...), "-o", torchrankBin, "./testdata/torchrank")...).CombinedOutput()
		if err != nil {
			torchrankErr = fmt.Errorf("go build ./testdata/torchrank: %v\n%s", err, out)
		}
	})
	if torchrankErr != nil {
		t.Fatal(torchrankErr)
	}
	return torchrankBin
}

var (
	uidLine    = regexp.MustCompile(`(?m)^rank (\d+) uid ([0-9a-f]+)$`)
	deviceLine = regexp.MustCompile(`(?m)^rank (\d+) device-step: (.*)$`)
)

// torchrun runs torchrun (through testdata/torchrun_launch.py) with nproc Go ranks and
// returns its output.
func torchrun(t *testing.T, env torchtest.Env, nproc int, backend string, restarts int, extraEnv ...string) string {
	t.Helper()
	bin := buildTorchrank(t)
	dir := torchtest.Stage(t, filepath.Join("testdata", "torchrun_launch.py"))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// freePort reserves the port for the test; torch's TCPStore server (1.13 and 2.x)
	// binds with SO_REUSEADDR, so torchrun's agent can still take it. Should the agent
	// fail with EADDRINUSE all the same, the launch is tried again on another port.
	for try := 1; ; try++ {
		cmd := env.Command(ctx, filepath.Join(dir, "torchrun_launch.py"), strconv.Itoa(nproc), backend,
			strconv.Itoa(freePort(t)), strconv.Itoa(restarts), bin)
		cmd.Env = append(testenv.Environ(), extraEnv...)
		out, err := cmd.CombinedOutput()
		if try < 3 && bytes.Contains(out, []byte("ddress already in use")) {
			t.Logf("torchrun attempt %d: its port was taken, trying another:\n%s", try, out)
			continue
		}
		if err != nil {
			t.Fatalf("torchrun %d ranks, %s rendezvous, torch %s: %v\n%s%s", nproc, backend, env.Version, err, out, testenv.FailureExcerpt(string(out)))
		}
		return string(out)
	}
}

// checkRanks checks that every rank passed the rendezvous and the unique id exchange
// (all with rank 0's id) and reached the device step.
func checkRanks(t *testing.T, out string, nproc int) {
	t.Helper()
	ids := map[string]string{}
	for _, m := range uidLine.FindAllStringSubmatch(out, -1) {
		ids[m[1]] = m[2]
	}
	steps := map[string]string{}
	for _, m := range deviceLine.FindAllStringSubmatch(out, -1) {
		steps[m[1]] = m[2]
	}
	for r := range nproc {
		rs := strconv.Itoa(r)
		if ids[rs] == "" || ids[rs] != ids["0"] {
			t.Errorf("rank %d: unique id %q, rank 0's %q", r, ids[rs], ids["0"])
		}
		if steps[rs] == "" {
			t.Errorf("rank %d did not reach the device step", r)
		}
	}
	if t.Failed() {
		t.Logf("launcher output:\n%s", out)
	}
}

// torchrun (torch 1.13 and 2.x) launches 4 Go ranks with static rendezvous and 2 with
// c10d; every rank gets past the rendezvous and the unique id exchange to the
// device step (which fails on a machine without a GPU).
func TestTorchrunLaunchesGoRanks(t *testing.T) {
	for _, name := range torchtest.Names() {
		t.Run(name, func(t *testing.T) {
			env := torchtest.Require(t, name)
			// Each backend once, the sizes shared between them: every launch starts
			// torch's python (seconds, more on a loaded machine).
			for _, tc := range []struct {
				backend string
				n       int
			}{{"static", 4}, {"c10d", 2}} {
				t.Run(fmt.Sprintf("%s/%d", tc.backend, tc.n), func(t *testing.T) {
					out := torchrun(t, env, tc.n, tc.backend, 0)
					checkRanks(t, out, tc.n)
					if strings.Contains(out, "*rendezvous.TCPStoreClient") && strings.Contains(out, "*rendezvous.Client") {
						t.Errorf("ranks disagree on the store:\n%s", out)
					}
				})
			}
		})
	}
}

// With --max-restarts 1 and one worker that dies, torchrun restarts the workers and
// they meet under the new attempt's prefix.
func TestTorchrunRestartMeetsInTheNewAttempt(t *testing.T) {
	for _, name := range torchtest.Names() {
		t.Run(name, func(t *testing.T) {
			env := torchtest.Require(t, name)
			out := torchrun(t, env, 2, "static", 1, "TORCHRANK_FAIL_RANK=1")
			if !strings.Contains(out, "rank 1 exits as if it crashed") || !strings.Contains(out, "restart 1") {
				t.Fatalf("no restart happened:\n%s", out)
			}
			checkRanks(t, out, 2)
		})
	}
}

// mpirun (Open MPI) launches 2 Go ranks on one machine: the ranks come from
// OMPI_COMM_WORLD_*, the store from 127.0.0.1, and they reach the device step.
func TestMpirunLaunchesGoRanks(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		msg := "mpirun is missing (install it: apt-get install openmpi-bin)"
		if torchtest.Strict() {
			t.Fatalf("NCCLGO_STRICT is set and %s", msg)
		}
		t.Skip(msg)
	}
	bin := buildTorchrank(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
		"-x", "MASTER_PORT="+strconv.Itoa(freePort(t)), bin)
	for _, kv := range os.Environ() {
		// A torchrun, Slurm or Kubernetes environment around the test must not leak into the ranks.
		if k, _, _ := strings.Cut(kv, "="); k == "RANK" || k == "WORLD_SIZE" || k == "LOCAL_RANK" || k == "LOCAL_WORLD_SIZE" || k == "MASTER_ADDR" ||
			k == "JOBSET_NAME" || k == "JOB_COMPLETION_INDEX" ||
			strings.HasPrefix(k, "SLURM_") || strings.HasPrefix(k, "TORCHELASTIC_") || strings.HasPrefix(k, "LWS_") || strings.HasPrefix(k, "PET_") {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun: %v\n%s%s", err, out, testenv.FailureExcerpt(string(out)))
	}
	checkRanks(t, string(out), 2)
	if !strings.Contains(string(out), "store *rendezvous.Client") {
		t.Errorf("ranks did not use ncclgo's store:\n%s", out)
	}
}
