//go:build cgo

package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/internal/libcache"
	"github.com/ncclgo/ncclgo/comm/mpi"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/internal/testenv"
	"github.com/ncclgo/ncclgo/kernels"
	rawmpi "github.com/ncclgo/ncclgo/raw/mpi"
)

// The MPI tests start real processes: the parent test runs this test binary under
//
//	mpirun --oversubscribe --allow-run-as-root -np N <test binary> -test.run=^TestMPI...$
//
// and each rank, seeing mpiChildEnv name the test, runs that test's rank body instead. A
// -race parent starts -race ranks.

const (
	mpiChildEnv    = "NCCLGO_MPI_RANK_TEST"
	mpiInstallHint = "apt-get install openmpi-bin libopenmpi-dev"
)

// runMPI runs test on np ranks under mpirun and returns the combined output; it fails t
// when a rank fails. Without mpirun it skips, or fails under NCCLGO_STRICT.
func runMPI(t *testing.T, np int, test string, env ...string) string {
	t.Helper()
	return runMPIBinary(t, os.Args[0], np, test, env...)
}

// runMPIBinary is runMPI with the ranks running the test binary bin.
func runMPIBinary(t testing.TB, bin string, np int, test string, env ...string) string {
	t.Helper()
	mpirun := needMPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	args := []string{"--oversubscribe", "--allow-run-as-root", "-np", strconv.Itoa(np), "-x", mpiChildEnv}
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		args = append(args, "-x", k)
	}
	args = append(args, bin, "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd := exec.CommandContext(ctx, mpirun, args...)
	cmd.Env = append(append(testenv.Environ(), mpiChildEnv+"="+test), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun -np %d %s: %v\n%s%s", np, test, err, out, testenv.FailureExcerpt(string(out)))
	}
	passed := strings.Count(string(out), "--- PASS: "+test+" ")
	skipped := strings.Count(string(out), "--- SKIP: "+test+" ")
	if skipped == np {
		t.Skipf("mpirun -np %d %s: every rank skipped: %s", np, test, skipReason(string(out), test))
	}
	if passed != np {
		t.Fatalf("mpirun -np %d %s: %d ranks passed, %d skipped\n%s%s", np, test, passed, skipped, out, testenv.FailureExcerpt(string(out)))
	}
	return string(out)
}

// runAlone runs test in a fresh process of this test binary, without mpirun (a job of
// one rank, as a program run alone is), and fails t unless it passed there. MPI is
// initialised once per process, so a test of what a process sees first (its
// initialisation, its first communicator) runs alone: -count=N and the tests before it
// would otherwise have initialised, or finalised, MPI in this process already.
func runAlone(t *testing.T, test string) {
	t.Helper()
	needMPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd.Env = append(testenv.Environ(), mpiChildEnv+"="+test)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+test+" ") {
		t.Fatalf("%s run alone: %v\n%s%s", test, err, out, testenv.FailureExcerpt(string(out)))
	}
}

// skipReason is what a rank's test logged before "--- SKIP: test" in -test.v output: its
// last indented line there.
func skipReason(out, test string) string {
	before, _, _ := strings.Cut(out, "--- SKIP: "+test+" ")
	lines := strings.Split(strings.TrimRight(before, "\n"), "\n")
	for i := len(lines) - 1; i >= 0 && strings.HasPrefix(lines[i], "    "); i-- {
		if i == 0 || !strings.HasPrefix(lines[i-1], "    ") {
			return strings.TrimSpace(lines[i])
		}
	}
	return "no reason given"
}

// needMPI returns mpirun's path, having loaded libmpi; without them it skips t, or fails
// it under NCCLGO_STRICT.
func needMPI(t testing.TB) string {
	t.Helper()
	mpirun, err := exec.LookPath("mpirun")
	if err == nil {
		err = rawmpi.Load()
	}
	if err != nil {
		msg := fmt.Sprintf("Open MPI is missing (%v): %s", err, mpiInstallHint)
		if os.Getenv("NCCLGO_STRICT") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return mpirun
}

// inRank reports whether this process is a rank that runMPI started for the test t: the
// test then runs its rank body instead of starting mpirun.
func inRank(t *testing.T) bool { return os.Getenv(mpiChildEnv) == t.Name() }

// newMPI opens the world communicator and closes it (finalising MPI) at the end.
func newMPI(t *testing.T) *mpi.Communicator {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := mpi.New(ctx)
	require.NoError(t, err)
	require.Equal(t, os.Getenv("OMPI_COMM_WORLD_RANK"), strconv.Itoa(c.Rank()), "the rank mpirun gave")
	require.Equal(t, os.Getenv("OMPI_COMM_WORLD_SIZE"), strconv.Itoa(c.WorldSize()))
	return c
}

func TestMPIConformance(t *testing.T) {
	if inRank(t) {
		mpiRankConformance(t)
		return
	}
	for _, np := range []int{1, 2, 4} {
		t.Run(strconv.Itoa(np)+"-ranks", func(t *testing.T) {
			out := runMPI(t, np, "TestMPIConformance")
			assert.Equal(t, np, strings.Count(out, "mpi finalized by its owner: true"))
		})
	}
}

// mpiInstance is a CommInstance of one rank: a fresh communicator split from the world
// (same ranks, same order) and host memory.
type mpiInstance struct {
	*commtest.HostMemory
	cs []comm.Communicator
	c  *mpi.Communicator
}

func (m *mpiInstance) Communicators() []comm.Communicator { return m.cs }
func (m *mpiInstance) DriverCalls() int64                 { return m.c.MPICalls() }
func (m *mpiInstance) Close() error                       { return m.c.Close() }

func mpiRankConformance(t *testing.T) {
	world := newMPI(t)
	rank, n := world.Rank(), world.WorldSize()
	commtest.RunCommunicatorConformance(t, commtest.CommHarness{
		Name:  "mpi",
		World: n,
		Local: []int{rank},
		// Pre-multiplied sums are NCCL's operators: MPI answers ErrUnsupported. Its
		// collectives complete when they return, so groups defer nothing.
		Lacks: []commtest.Capability{commtest.CapPreMulSum, commtest.CapGroupScope},
		Start: func() (commtest.CommInstance, error) {
			sub, err := world.Split(context.Background(), 0, rank)
			if err != nil {
				return nil, err
			}
			c := sub.(*mpi.Communicator)
			cs := make([]comm.Communicator, n)
			cs[rank] = c
			return &mpiInstance{HostMemory: commtest.NewHostMemory(), cs: cs, c: c}, nil
		},
	})
	require.NoError(t, world.Close())
	var flag int32
	require.NoError(t, rawmpi.Finalized(&flag))
	fmt.Printf("mpi finalized by its owner: %v\n", flag != 0)
	_, err := mpi.New(context.Background())
	require.Error(t, err, "MPI cannot start twice in a process")
	assert.Contains(t, err.Error(), "finalized")
}

func TestMPIBitForBitAndTags(t *testing.T) {
	if inRank(t) {
		mpiRankBitForBitAndTags(t)
		return
	}
	runMPI(t, 2, t.Name())
}

// hostBuf returns pinned host memory of n elements of T and its address.
func hostBuf[T any](t *testing.T, n int) ([]T, comm.DevicePtr) {
	s := make([]T, max(n, 1))
	var pin runtime.Pinner
	pin.Pin(&s[0])
	t.Cleanup(pin.Unpin)
	return s[:n], comm.DevicePtr(uintptr(unsafe.Pointer(&s[0])))
}

func mpiRankBitForBitAndTags(t *testing.T) {
	c := newMPI(t)
	defer func() { require.NoError(t, c.Close()) }()
	ctx := context.Background()
	rank := c.Rank()

	// bfloat16 and float16 sums of two ranks: one addition per element, which the
	// user-defined operation must round exactly as kernels.AddBF16 / AddF16.
	for _, tc := range []struct {
		t   comm.DType
		add func(dst, src []uint16) error
	}{{comm.BFloat16, kernels.AddBF16}, {comm.Float16, kernels.AddF16}} {
		const count = 1 << 16
		vals := func(r int) []uint16 {
			rng := rand.New(rand.NewPCG(uint64(r), 99))
			v := make([]uint16, count)
			for i := range v {
				v[i] = uint16(i)
				if r == 1 {
					v[i] = uint16(rng.UintN(1 << 16))
				}
			}
			return v
		}
		buf, p := hostBuf[uint16](t, count)
		copy(buf, vals(rank))
		require.NoError(t, c.AllReduce(p, count, tc.t, comm.Sum))
		want := vals(0)
		require.NoError(t, tc.add(want, vals(1)))
		diff := 0
		for i := range want {
			if buf[i] != want[i] {
				diff++
			}
		}
		require.Zero(t, diff, "%v: %d of %d sums differ from the kernels reference", tc.t, diff, count)
	}

	// Tags: rank 0 sends tag 1 then tag 2; rank 1 posts the tag 2 receive first. Each
	// message must land in the receive with its own tag.
	one, p1 := hostBuf[int32](t, 4)
	two, p2 := hostBuf[int32](t, 4)
	if rank == 0 {
		copy(one, []int32{1, 1, 1, 1})
		copy(two, []int32{2, 2, 2, 2})
		require.NoError(t, c.Send(p1, 4, comm.Int32, 1, 1))
		require.NoError(t, c.Send(p2, 4, comm.Int32, 1, 2))
	} else {
		require.NoError(t, c.Recv(p2, 4, comm.Int32, 0, 2))
		require.NoError(t, c.Recv(p1, 4, comm.Int32, 0, 1))
	}
	require.NoError(t, c.Sync(ctx))
	assert.Equal(t, []int32{1, 1, 1, 1}, one, "tag 1")
	assert.Equal(t, []int32{2, 2, 2, 2}, two, "tag 2")

	// A tag MPI cannot carry fails before MPI.
	before := c.MPICalls()
	err := c.Send(p1, 1, comm.Int32, 1-rank, 1<<31)
	require.ErrorIs(t, err, comm.ErrUnsupported)
	assert.Contains(t, err.Error(), "MPI_TAG_UB")
	assert.Equal(t, before, c.MPICalls(), "the bad tag reached MPI")
	require.NoError(t, c.Barrier(ctx))
}

func TestMPIGoRuntimeAndSignals(t *testing.T) {
	if inRank(t) {
		mpiRankGoRuntimeAndSignals(t)
		return
	}
	// Ask Open MPI for its signal handlers explicitly (its default list): Go's must stay.
	runMPI(t, 2, t.Name(), "OMPI_MCA_opal_signal=6,7,8,11")
}

// mpiRankGoRuntimeAndSignals checks that Go and MPI share the process: Go's SIGSEGV
// handler survives MPI_Init (a nil dereference is still a recoverable panic), and
// all-reduces from many goroutines, with garbage collection and preemption signals
// going on, all complete with the right sums.
func mpiRankGoRuntimeAndSignals(t *testing.T) {
	c := newMPI(t)
	defer func() { require.NoError(t, c.Close()) }()

	recovered := func() (r any) {
		defer func() { r = recover() }()
		var p *int
		return *p
	}()
	var re runtime.Error
	require.True(t, errors.As(recovered.(error), &re), "nil dereference after MPI_Init: %v", recovered)

	stop := make(chan struct{})
	var churn sync.WaitGroup
	for range 4 {
		churn.Go(func() {
			var keep [][]byte
			for {
				select {
				case <-stop:
					return
				default:
				}
				keep = append(keep, make([]byte, 64<<10))
				if len(keep) > 64 {
					keep = keep[:0]
					runtime.GC()
				}
			}
		})
	}
	const goroutines, rounds = 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*rounds)
	var order sync.Mutex // every rank must issue the collectives in the same order
	next := 0
	for g := range goroutines {
		wg.Go(func() {
			buf, p := hostBuf[int64](t, 16)
			for range rounds {
				order.Lock()
				seq := next
				next++
				for i := range buf {
					buf[i] = int64(seq*1000 + i + c.Rank())
				}
				err := c.AllReduce(p, 16, comm.Int64, comm.Sum)
				order.Unlock()
				n := int64(c.WorldSize())
				for i, v := range buf {
					if want := n*int64(seq*1000+i) + n*(n-1)/2; err == nil && v != want {
						err = fmt.Errorf("goroutine %d round %d: element %d is %d, want %d", g, seq, i, v, want)
					}
				}
				errs <- err
			}
		})
	}
	wg.Wait()
	close(stop)
	churn.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestMPINCCLBringUp starts an NCCL job under mpirun without a rendezvous store: every
// rank must report the same unique id (exchanged by MPI_Bcast, then a barrier), its local
// rank from MPI, and then get as far as opening its device: on a machine without a GPU,
// that is where it stops, with an error saying so.
// TestMPIRanksThatSkipSkipTheParent: when every rank skips (a library the ranks load is
// not cached), the parent test skips with the ranks' reason instead of failing for want
// of passes.
func TestMPIRanksThatSkipSkipTheParent(t *testing.T) {
	if inRank(t) {
		t.Skip("libnothing.so is not cached: run make libs")
	}
	needMPI(t) // so that a skip below is the ranks'
	var skipped bool
	t.Run("ranks", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		runMPI(t, 2, "TestMPIRanksThatSkipSkipTheParent")
	})
	assert.True(t, skipped, "the parent skips when its ranks skip")
}

func TestMPINCCLBringUp(t *testing.T) {
	if inRank(t) {
		mpiRankNCCLBringUp(t)
		return
	}
	const np = 2
	libcache.Load(t) // what the ranks load: skip here when it is not cached, before starting them
	out := runMPI(t, np, t.Name())
	ids := map[string]bool{}
	locals := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "bring-up ")
		if !ok {
			continue
		}
		f := map[string]string{}
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		ids[f["id"]] = true
		locals[f["local"]] = true
		if f["device_opened"] != "true" {
			assert.Equal(t, "open-device", f["stopped"], "rank %s stopped before opening its device: %s", f["rank"], line)
		}
	}
	require.Len(t, ids, 1, "every rank holds rank 0's id:\n%s", out)
	assert.NotContains(t, ids, "", "the exchange was logged on every rank")
	assert.Equal(t, map[string]bool{"0/2": true, "1/2": true}, locals, "local ranks from MPI_COMM_TYPE_SHARED")
}

func mpiRankNCCLBringUp(t *testing.T) {
	libcache.Load(t)
	c := newMPI(t)
	defer func() { require.NoError(t, c.Close()) }()
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := c.NewNCCL(ctx, nccl.WithLogger(log), nccl.WithElementType(comm.Float32))
	mu.Lock()
	text := logs.String()
	mu.Unlock()
	fields := map[string]string{}
	for _, kv := range strings.Fields(text) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			fields[k] = v
		}
	}
	stopped := "none"
	switch {
	case err == nil:
		require.NoError(t, b.Close())
	case strings.Contains(err.Error(), "open device"):
		stopped = "open-device"
		var oe *comm.OpError
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, c.Rank(), oe.Rank)
	default:
		stopped = "nccl-init"
		require.Contains(t, text, "comm: device opened", "failed before opening the device: %v", err)
	}
	fmt.Printf("bring-up rank=%d id=%s local=%s/%s device_opened=%v stopped=%s err=%q\n", c.Rank(), fields["id"],
		fields["local_rank"], fields["local_world"], strings.Contains(text, "comm: device opened"), stopped, fmt.Sprint(err))
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestMPIForeignInitAndPendingClose: when the application initialised MPI itself, comm
// neither initialises nor finalises it; Sync gives up when ctx ends on a receive that
// never matches, and Close cancels it within the close timeout instead of hanging.
func TestMPIForeignInitAndPendingClose(t *testing.T) {
	if inRank(t) {
		mpiRankForeignInitAndPendingClose(t)
		return
	}
	runMPI(t, 2, t.Name())
}

func mpiRankForeignInitAndPendingClose(t *testing.T) {
	runtime.LockOSThread() // MPI_Finalize below must run on the thread of MPI_Init_thread
	defer runtime.UnlockOSThread()
	var provided int32
	require.NoError(t, rawmpi.InitThread(nil, nil, rawmpi.ThreadMultiple, &provided))
	c, err := mpi.New(context.Background(), mpi.WithCloseTimeout(200*time.Millisecond))
	require.NoError(t, err)
	_, p := hostBuf[int32](t, 1)
	if c.Rank() == 0 {
		require.NoError(t, c.Recv(p, 1, comm.Int32, 1, 99)) // rank 1 never sends it
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := c.Sync(ctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		err = c.Close()
		require.ErrorIs(t, err, context.DeadlineExceeded, "Close reports the receive it had to cancel")
	} else {
		require.NoError(t, c.Close())
	}
	require.ErrorIs(t, c.Close(), comm.ErrClosed)
	// comm set up again on the application's MPI: a new communicator works.
	again, err := mpi.New(context.Background())
	require.NoError(t, err)
	v, pv := hostBuf[uint16](t, 1)
	v[0] = kernels.Float32ToBF16(1.5) // reduced by the user operation, created anew
	require.NoError(t, again.AllReduce(pv, 1, comm.BFloat16, comm.Sum))
	assert.Equal(t, float32(3), kernels.BF16ToFloat32(v[0]))
	require.NoError(t, again.Close())
	var flag int32
	require.NoError(t, rawmpi.Finalized(&flag))
	require.Zero(t, flag, "comm did not initialise MPI, so it must not finalise it")
	require.NoError(t, rawmpi.Barrier(must(t, rawmpi.CommWorld)))
	require.NoError(t, rawmpi.Finalize())
}

func must[T any](t *testing.T, f func() (T, error)) T {
	t.Helper()
	v, err := f()
	require.NoError(t, err)
	return v
}

func TestMPITypedInPlaceAndRoots(t *testing.T) {
	if inRank(t) {
		mpiRankTypedInPlaceAndRoots(t)
		return
	}
	runMPI(t, 3, t.Name())
}

// mpiRankTypedInPlaceAndRoots checks the MPI forms that the conformance suite does not
// reach: the in-place forms of AllReduceInto, Reduce, Gather and Scatter (MPI_IN_PLACE
// on root), null receive buffers on the ranks that do not receive, BroadcastInto with
// no send buffer off root, an integer Avg reduced to a root, and PreMulSum answering
// ErrUnsupported without an MPI call.
func mpiRankTypedInPlaceAndRoots(t *testing.T) {
	c := newMPI(t)
	defer func() { require.NoError(t, c.Close()) }()
	ctx := context.Background()
	rank, n := c.Rank(), c.WorldSize()
	const count = 4
	sum := func(i int) int32 { return int32(n*(n-1)/2 + n*i) } // sum over ranks of rank+i

	buf, p := hostBuf[int32](t, count)
	for i := range buf {
		buf[i] = int32(rank + i)
	}
	require.NoError(t, c.AllReduceInto(p, p, count, comm.Int32, comm.Sum))
	for i, v := range buf {
		require.Equal(t, sum(i), v, "in-place all-reduce-into, element %d", i)
	}

	const root = 1
	for i := range buf {
		buf[i] = int32(rank*10 + i)
	}
	recv := comm.DevicePtr(0)
	if rank == root {
		recv = p // in place on root
	}
	require.NoError(t, c.Reduce(p, recv, count, comm.Int32, comm.Max, root))
	if rank == root {
		for i, v := range buf {
			require.Equal(t, int32((n-1)*10+i), v, "in-place reduce max on root, element %d", i)
		}
	}

	send, ps := hostBuf[int32](t, count)
	out, po := hostBuf[int32](t, count)
	for i := range send {
		send[i] = int32(rank + i)
		out[i] = -7
	}
	require.NoError(t, c.Reduce(ps, po, count, comm.Int32, comm.Avg, root))
	for i := range send {
		require.Equal(t, int32(rank+i), send[i], "reduce avg leaves send")
		want := int32(-7)
		if rank == root {
			want = sum(i) / int32(n)
		}
		require.Equal(t, want, out[i], "integer reduce avg to root %d, rank %d, element %d", root, rank, i)
	}

	all, pa := hostBuf[int32](t, count*n)
	for i := range all {
		all[i] = -1
	}
	mine := pa + comm.DevicePtr(rank*count*4)
	for i := range count {
		all[rank*count+i] = int32(rank*100 + i)
	}
	gatherRecv := comm.DevicePtr(0)
	if rank == root {
		gatherRecv = pa // root's own block is already in place
	}
	require.NoError(t, c.Gather(mine, gatherRecv, count, comm.Int32, root))
	if rank == root {
		for q := range n {
			for i := range count {
				require.Equal(t, int32(q*100+i), all[q*count+i], "in-place gather, block %d", q)
			}
		}
	}

	for i := range all {
		all[i] = int32(i)
	}
	if rank == root {
		require.NoError(t, c.Scatter(pa, mine, count, comm.Int32, root)) // root's block stays in place
	} else {
		for i := range out {
			out[i] = -1
		}
		require.NoError(t, c.Scatter(0, po, count, comm.Int32, root))
		for i := range out {
			require.Equal(t, int32(rank*count+i), out[i], "scatter to rank %d, element %d", rank, i)
		}
	}

	const from = 2
	for i := range out {
		out[i] = -1
		send[i] = int32(rank*1000 + i)
	}
	bsend := comm.DevicePtr(0)
	if rank == from {
		bsend = ps
	}
	require.NoError(t, c.BroadcastInto(bsend, po, count, comm.Int32, from))
	for i := range out {
		require.Equal(t, int32(from*1000+i), out[i], "broadcast-into from %d, element %d", from, i)
	}

	before := c.MPICalls()
	_, err := c.PreMulSum(comm.Float32, 2)
	require.ErrorIs(t, err, comm.ErrUnsupported)
	_, err = c.PreMulSumDevice(comm.Float32, p)
	require.ErrorIs(t, err, comm.ErrUnsupported)
	require.ErrorIs(t, c.DestroyReduceOp(comm.Sum), comm.ErrUnsupported)
	require.ErrorIs(t, c.AllReduceInto(p, p, 1, comm.Float32, 1<<20), comm.ErrInvalidOp, "an operator of no communicator")
	assert.Equal(t, before, c.MPICalls(), "pre-mul-sum reached MPI")
	require.NoError(t, c.Barrier(ctx))
}

func TestMPIMinGOMAXPROCS(t *testing.T) {
	if inRank(t) {
		mpiRankMinGOMAXPROCS(t)
		return
	}
	out := runMPI(t, 2, t.Name())
	assert.Equal(t, 2, strings.Count(out, "GOMAXPROCS after NewMPI: 3"), out)
}

// mpiRankMinGOMAXPROCS starts from GOMAXPROCS 1 (what mpirun's binding to one core gives
// Go): WithMinGOMAXPROCS(3) raises it and says so at Debug, nothing at Info; a second
// communicator asking for 2 changes and logs nothing; both work.
func mpiRankMinGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var logs, logs2 strings.Builder
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := mpi.New(ctx, mpi.WithMinGOMAXPROCS(3), mpi.WithLogger(slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	require.NoError(t, err)
	fmt.Printf("GOMAXPROCS after NewMPI: %d\n", runtime.GOMAXPROCS(0))
	mu.Lock()
	text := logs.String()
	mu.Unlock()
	assert.NotContains(t, text, "level=INFO", "an option doing what it was asked is no news at Info")
	assert.Contains(t, text, "level=DEBUG")
	assert.Contains(t, text, "GOMAXPROCS")
	assert.Contains(t, text, "from=1 to=3 cpus="+strconv.Itoa(runtime.NumCPU()))
	c2, err := mpi.New(ctx, mpi.WithMinGOMAXPROCS(2), mpi.WithLogger(slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs2}, nil))))
	require.NoError(t, err)
	assert.Equal(t, 3, runtime.GOMAXPROCS(0), "never lowered")
	mu.Lock()
	assert.Empty(t, logs2.String(), "nothing changed, nothing logged")
	mu.Unlock()
	for _, x := range []*mpi.Communicator{c, c2} {
		v, p := hostBuf[int32](t, 1)
		v[0] = int32(x.Rank() + 1)
		require.NoError(t, x.AllReduce(p, 1, comm.Int32, comm.Sum))
		assert.Equal(t, int32(3), v[0])
	}
	require.NoError(t, c2.Close())
	require.NoError(t, c.Close())
}

// TestMPIMinGOMAXPROCSNegative runs alone: in a fresh process, a bad option is refused
// before MPI is initialised.
func TestMPIMinGOMAXPROCSNegative(t *testing.T) {
	if !inRank(t) {
		runAlone(t, t.Name())
		return
	}
	before := runtime.GOMAXPROCS(0)
	_, err := mpi.New(context.Background(), mpi.WithMinGOMAXPROCS(-1))
	var arg *comm.ArgError
	require.ErrorAs(t, err, &arg)
	assert.ErrorIs(t, err, comm.ErrInvalidSize)
	assert.Equal(t, -1, arg.Value)
	assert.Equal(t, before, runtime.GOMAXPROCS(0))
	require.NoError(t, rawmpi.Load())
	var flag int32
	require.NoError(t, rawmpi.Initialized(&flag))
	assert.Zero(t, flag, "the bad option never reached MPI")
}
