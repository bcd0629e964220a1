package flightrec

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/testenv"
)

// sidRoot returns the command prefix that runs a program inside the Debian sid root
// holding torch 2.14 (its python3 has torch's flight-recorder analyzer), or skips the
// test saying how to get it (fails under NCCLGO_STRICT). The root is
// $NCCLGO_TORCH_SID_ROOT, else $NCCLGO_CACHE/torch-sid, else ~/.cache/ncclgo/torch-sid;
// .ci/torch-chroot.sh enters it.
func sidRoot(t testing.TB) []string {
	t.Helper()
	skip := func(why string) {
		if strictEnv() {
			t.Fatalf("NCCLGO_STRICT is set and torch 2.14 is missing: %s", why)
		}
		t.Skipf("torch 2.14 is missing: %s", why)
	}
	root := os.Getenv("NCCLGO_TORCH_SID_ROOT")
	if root == "" {
		cache := os.Getenv("NCCLGO_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "ncclgo")
		}
		root = filepath.Join(cache, "torch-sid")
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", ".ci", "torch-chroot.sh")
	how := "build it (as root, ~10 min, ~1 GB): " + script + " build sid"
	if _, err := os.Stat(filepath.Join(root, ".ncclgo-ready")); err != nil {
		skip("no Debian sid root at " + root + ": " + how)
	}
	if os.Geteuid() != 0 {
		skip("the sid root at " + root + " needs root to enter (chroot)")
	}
	out, err := exec.Command(script, "dir", "sid").Output()
	if err != nil || filepath.Clean(strings.TrimSpace(string(out))) != filepath.Clean(root) {
		skip(script + " does not enter the sid root at " + root + " (it knows no sid root)")
	}
	return []string{script, "run", "--root", "sid"}
}

// tmpDir is a directory under /tmp, which the sid root shares.
func tmpDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "ncclgo-fr-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// frTrace runs torch's analyzer on dir and returns its output and error.
func frTrace(t testing.TB, root []string, dir string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	argv := append(append(slices.Clone(root), "python3", "-m", "torch.distributed.flight_recorder.fr_trace"), args...)
	argv = append(argv, dir)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var (
	frCollective = regexp.MustCompile(`(?m)^collective: (\w+):(\w+)`)
	frMissing    = regexp.MustCompile(`(?m)^missing ranks: \{([\d, ]+)\}`)
	frCulprit    = regexp.MustCompile(`Culprit rank (\d+);`)
	frNoDump     = regexp.MustCompile(`Missing dump files from ranks \{([\d, ]+)\}`)
	// A coalesced group of sends and receives that does not match: fr_trace names the
	// ranks that posted no part of it, and prints the group's operations, the first
	// unmatched one first (global ranks).
	frMismatch = regexp.MustCompile(`(?m)^MISMATCH`)
	frEmptyOps = regexp.MustCompile(`Rank (\d+) has an empty op list\.`)
	frGroupOp  = regexp.MustCompile(`(?m)^(send|recv)\(s=(\d+) d=(\d+),`)
)

func intSet(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

// torch 2.14's fr_trace, on the dumps of each simulated hang, names the rank and
// operation Analyze (what tools/commtrace prints) names.
func TestTorchAnalyzerAgreesOnEachHang(t *testing.T) {
	sidRoot(t)
	for _, h := range hangs {
		t.Run(h.name, func(t *testing.T) { agreeOnHang(t, h) })
	}
}

// agreeOnHang builds h's dumps in a directory the sid root shares, checks that
// Analyze names h's culprit, then (skipping without the sid root) that torch 2.14's
// fr_trace names the same rank and operation.
func agreeOnHang(t *testing.T, h hang) {
	dir := tmpDir(t)
	h.build(t, dir)
	traces, err := ReadDir(dir, "")
	require.NoError(t, err)
	vs := Analyze(traces)
	var ours bytes.Buffer
	require.NoError(t, Report(&ours, vs))
	v := verdictOf(t, vs, h)
	require.Equal(t, h.problem, v.Problem, "commtrace:\n%s", ours.String())
	require.Equal(t, []int{h.culprit}, v.Culprits, "commtrace:\n%s", ours.String())
	t.Logf("commtrace %s:\n%s", dir, ours.String())
	root := sidRoot(t)
	out, err := frTrace(t, root, dir)
	t.Logf("fr_trace %s:\n%s\ncommtrace:\n%s", dir, out, ours.String())
	if h.noDump {
		require.Error(t, err, "fr_trace accepted a job with a rank's dump missing")
		m := frNoDump.FindStringSubmatch(out)
		require.NotNil(t, m, "fr_trace does not say which dump is missing")
		require.Equal(t, []int{h.culprit}, intSet(m[1]))
		// With --allow-incomplete-ranks it analyses the others: the op they wait in.
		out, err = frTrace(t, root, dir, "--allow-incomplete-ranks")
		require.NoError(t, err, "%s%s", out, testenv.FailureExcerpt(out))
		require.Contains(t, out, "missed FR dumps from ranks ({"+strconv.Itoa(h.culprit)+"})")
		return
	}
	require.NoError(t, err, "fr_trace failed:\n%s%s", out, testenv.FailureExcerpt(out))
	if h.problem == Unmatched && frMismatch.MatchString(out) {
		op := frGroupOp.FindStringSubmatch(out)
		require.NotNil(t, op, "fr_trace prints no operation of the coalesced group")
		require.Equal(t, h.op, op[1], "fr_trace names another operation")
		peer := op[3] // a send's receiver, a receive's sender, did not post its part
		if op[1] == "recv" {
			peer = op[2]
		}
		require.Equal(t, strconv.Itoa(h.culprit), peer)
		var empty []int
		for _, e := range frEmptyOps.FindAllStringSubmatch(out, -1) {
			n, _ := strconv.Atoi(e[1])
			empty = append(empty, n)
		}
		require.Equal(t, []int{h.culprit}, empty, "fr_trace names other ranks without their part")
		return
	}
	m := frCollective.FindStringSubmatch(out)
	require.NotNil(t, m, "fr_trace found nothing wrong")
	require.Equal(t, "nccl", m[1])
	require.Equal(t, h.op, m[2], "fr_trace names another operation")
	switch h.problem {
	case Missing, Unmatched:
		mm := frMissing.FindStringSubmatch(out)
		require.NotNil(t, mm, "fr_trace names no missing rank")
		require.Equal(t, []int{h.culprit}, intSet(mm[1]))
	case Mismatch:
		var culprits []int
		for _, c := range frCulprit.FindAllStringSubmatch(out, -1) {
			n, _ := strconv.Atoi(c[1])
			culprits = append(culprits, n)
		}
		sort.Ints(culprits)
		// fr_trace compares every rank with the first dump it lists (directory
		// order): it names the odd rank, or, when it started from the odd rank,
		// every other member.
		others := slices.DeleteFunc(slices.Clone(h.ranks), func(r int) bool { return r == h.culprit })
		if !slices.Equal(culprits, []int{h.culprit}) {
			require.Equal(t, others, culprits, "fr_trace blames neither rank %d nor the others", h.culprit)
		}
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// A directory holding the dumps of two torch 2.14 ranks (gloo, recorded by torch
// itself) and of two Go ranks loads in both analyzers: torch's loader reads every
// file and accepts the versions as one, commtrace gives a verdict per communicator,
// and fr_trace fails on the mixed directory only as it fails on torch's dumps alone
// (torch 2.14's gloo backend records its groups under an empty name in pg_config, so
// fr_trace cannot look its own gloo entries up).
func TestTorchGlooAndGoDumpsLoadTogether(t *testing.T) {
	root := sidRoot(t)
	work := tmpDir(t)
	mixed := filepath.Join(work, "mixed")
	torchOnly := filepath.Join(work, "torch")
	require.NoError(t, os.Mkdir(mixed, 0o755))
	require.NoError(t, os.Mkdir(torchOnly, 0o755))
	script, err := os.ReadFile(filepath.Join("testdata", "torch", "gloo_fr.py"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(work, "gloo_fr.py"), script, 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	argv := append(slices.Clone(root), "python3", filepath.Join(work, "gloo_fr.py"),
		filepath.Join(torchOnly, "nccl_trace_rank_"), filepath.Join(work, "store"))
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "torch's gloo ranks: %s%s", out, testenv.FailureExcerpt(string(out)))
	require.Contains(t, string(out), "OK 2.14")
	for r := range 2 {
		b, err := os.ReadFile(filepath.Join(torchOnly, "nccl_trace_rank_"+strconv.Itoa(r)))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(mixed, "nccl_trace_rank_"+strconv.Itoa(r)), b, 0o644))
	}
	// Go ranks 2 and 3 on a communicator of their own; rank 3 skips its last
	// all-reduce.
	for r := 2; r < 4; r++ {
		rec := newRecorder(t, Config{Entries: 64, DumpFile: filepath.Join(mixed, "nccl_trace_rank_")}, r)
		c := newComm(t, rec, Group{Name: "go", Desc: "go_world", ID: 0, Ranks: []int{2, 3}})
		for range 2 {
			c.Completed(c.Record(Call{Op: AllReduce, In: 4, Out: 4, Type: Float32}))
		}
		if r == 2 {
			c.Record(Call{Op: AllReduce, In: 4, Out: 4, Type: Float32})
		}
		_, err := rec.WriteFile()
		require.NoError(t, err)
	}

	// Torch's loader reads all four, and their versions agree.
	loader := `
import argparse, sys
from torch.distributed.flight_recorder.components.loader import read_dir
from torch.distributed.flight_recorder.components.utils import check_version
details, version = read_dir(argparse.Namespace(trace_dir=sys.argv[1], prefix=None))
check_version({d["rank"]: d["version"] for d in details.values()}, version)
print("LOADED", sorted(d["rank"] for d in details.values()), version)
`
	argv = append(slices.Clone(root), "python3", "-c", loader, mixed)
	cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = 5 * time.Second
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "torch's loader: %s%s", out, testenv.FailureExcerpt(string(out)))
	require.Contains(t, string(out), "LOADED [0, 1, 2, 3] 2.10")

	// commtrace: torch's groups agree, the Go communicator names rank 3.
	traces, err := ReadDir(mixed, "")
	require.NoError(t, err)
	vs := Analyze(traces)
	var report bytes.Buffer
	require.NoError(t, Report(&report, vs))
	t.Logf("commtrace:\n%s", report.String())
	v := verdictOf(t, vs, hang{group: "go", ranks: []int{2, 3}})
	require.Equal(t, Missing, v.Problem)
	require.Equal(t, []int{3}, v.Culprits)
	w := verdictOf(t, vs, hang{group: "0", ranks: []int{0, 1}})
	require.Empty(t, w.Problem, "torch's ranks agree: %+v", w)
	require.True(t, w.Inferred)

	// fr_trace: the mixed directory fails only as torch's own dumps do.
	alone, errAlone := frTrace(t, root, torchOnly)
	both, errBoth := frTrace(t, root, mixed)
	t.Logf("fr_trace on torch's dumps:\n%s\nfr_trace on the mixed directory:\n%s", alone, both)
	if errAlone == nil {
		require.NoError(t, errBoth, "fr_trace reads torch's gloo dumps but not the mixed directory:\n%s%s", both, testenv.FailureExcerpt(both))
		return
	}
	require.Error(t, errBoth)
	// The lookup that fails is of a torch rank's (0 or 1) group: which rank comes
	// first depends on the directory's order.
	torchLookup := regexp.MustCompile(`^KeyError: \('\d+', [01]\)$`)
	require.Regexp(t, torchLookup, lastLine(alone), "fr_trace fails otherwise than on torch's empty pg_config")
	require.Regexp(t, torchLookup, lastLine(both), "the Go dumps add a failure of their own")
}
