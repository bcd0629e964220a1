//go:build cgo

package mpi_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/mpi"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/internal/testenv"
	"github.com/ncclgo/ncclgo/kernels"
	rawcuda "github.com/ncclgo/ncclgo/raw/cuda"
	rawmpi "github.com/ncclgo/ncclgo/raw/mpi"
	rawnccl "github.com/ncclgo/ncclgo/raw/nccl"
)

// TestMPISplitChildAndParentConcurrently runs, on 4 ranks, all-reduces on the world
// communicator in one goroutine and on an even/odd child of it (Split) in another, as
// data- and tensor-parallel groups are used. Every rank issues each communicator's
// calls in the same order, but the two goroutines interleave differently on every rank:
// with one process-wide lock held across the blocking calls, that deadlocked every time.
// A rank that has not finished within its deadline prints how far each goroutine got and
// exits, so that a regression fails instead of hanging.
func TestMPISplitChildAndParentConcurrently(t *testing.T) {
	if inRank(t) {
		mpiRankSplitChildAndParentConcurrently(t)
		return
	}
	out := runMPI(t, 4, t.Name())
	assert.Equal(t, 4, strings.Count(out, "parent and child done"), out)
}

func mpiRankSplitChildAndParentConcurrently(t *testing.T) {
	world := newMPI(t)
	rank, n := world.Rank(), world.WorldSize()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := world.Split(ctx, rank%2, rank)
	require.NoError(t, err)
	child := sub.(*mpi.Communicator)
	const rounds = 200
	var parentDone, childDone atomic.Int64
	errs := make(chan error, 2)
	run := func(c *mpi.Communicator, done *atomic.Int64, name string) {
		v, p := hostBuf[int64](t, 4)
		for i := range rounds {
			for j := range v {
				v[j] = int64(c.Rank() + i + j)
			}
			if err := c.AllReduce(p, len(v), comm.Int64, comm.Sum); err != nil {
				errs <- fmt.Errorf("%s round %d: %w", name, i, err)
				return
			}
			m := int64(c.WorldSize())
			for j, got := range v {
				if want := m*int64(i+j) + m*(m-1)/2; got != want {
					errs <- fmt.Errorf("%s round %d element %d: %d, want %d", name, i, j, got, want)
					return
				}
			}
			done.Add(1)
		}
		errs <- nil
	}
	go run(world, &parentDone, "parent")
	go run(child, &childDone, "child")
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for range 2 {
		select {
		case err := <-errs:
			require.NoError(t, err)
		case <-deadline.C:
			// The goroutines are stuck in C: no way to end them but to leave.
			fmt.Printf("rank %d of %d: deadlock: parent %d, child %d of %d rounds\n", rank, n, parentDone.Load(), childDone.Load(), rounds)
			os.Exit(3)
		}
	}
	fmt.Println("parent and child done")
	require.NoError(t, child.Close())
	require.NoError(t, world.Close())
}

// TestMPIWaitDoesNotStarve checks that how long a wait lasts does not depend on how many
// goroutines are runnable. Rank 0 runs with GOMAXPROCS 1 and times its barriers with 1
// and with 64 CPU-bound goroutines; rank 1 arrives at every barrier 2 ms late, so rank 0
// really waits (back-to-back barriers complete while the waiter still spins, and prove
// nothing). A wait that polls with runtime.Gosched queues the waiter behind every busy
// goroutine's scheduling slice at each poll, so 64 goroutines cost 64 times what one
// costs (over 30x here); a wait that naps on a timer is woken ahead of them and costs
// one slice whatever their number. The factor allowed (4x, in the best of 3 attempts)
// leaves room for a loaded machine.
func TestMPIWaitDoesNotStarve(t *testing.T) {
	if inRank(t) {
		mpiRankWaitDoesNotStarve(t)
		return
	}
	// The race detector's scheduler turns half of the wakes that would run next into
	// wakes at the back of the run queue, on purpose (runtime.runqput randomises them
	// under -race), which puts a goroutine woken by its timer behind the busy ones: what
	// is checked here is Go's scheduler without the race detector, so a -race run
	// starts ranks of this package's tests built without it.
	bin := os.Args[0]
	if testenv.RaceEnabled {
		bin = testBinaryWithoutRace(t)
	}
	// 2 ranks, one core each on the 2-core test machine: with 4 ranks oversubscribing
	// 2 cores, a barrier's progress is the kernel's scheduling of CPU-bound processes.
	out := runMPIBinary(t, bin, 2, t.Name())
	t.Log(grepLines(out, "barrier"))
}

// testBinaryWithoutRace builds this package's tests without the race detector, with
// PATH's go command (go test puts its own first).
func testBinaryWithoutRace(t testing.TB) string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command to build the ranks without -race: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "mpi.test")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goCmd, "test", "-c", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go test -c -o %s .: %s", bin, out)
	return bin
}

func grepLines(out, word string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, word) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func mpiRankWaitDoesNotStarve(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	c := newMPI(t)
	defer func() { require.NoError(t, c.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const iterations, attempts = 10, 3
	var ratio float64
	for attempt := range attempts {
		few := lateBarriers(t, c, ctx, 1, iterations, 2*time.Millisecond)
		many := lateBarriers(t, c, ctx, 64, iterations, 2*time.Millisecond)
		ratio = 0 // rank 0 measures; the others add nothing to the maximum, not an earlier attempt's
		if c.Rank() == 0 {
			// at least a microsecond per barrier: never divide by a vanishing figure
			ratio = float64(many) / float64(max(few, iterations*time.Microsecond))
			fmt.Printf("rank 0 attempt %d: %d barriers with a late peer: 1 busy goroutine %v, 64 busy goroutines %v (%.1fx)\n",
				attempt, iterations, few, many, ratio)
		}
		worst, p := hostBuf[float64](t, 1)
		worst[0] = ratio
		require.NoError(t, c.AllReduce(p, 1, comm.Float64, comm.Max))
		if ratio = worst[0]; ratio < 4 {
			break
		}
	}
	assert.Less(t, ratio, 4.0, "rank 0's waits grow with the number of runnable goroutines in every attempt")
}

// lateBarriers runs iterations barriers on c with busy CPU-bound goroutines on rank 0,
// the other ranks arriving lateBy late at each (or, when lateBy is 0, with as many busy
// goroutines on every rank, as in the issue that found the starving waits), and
// returns how long the rank's barriers took.
func lateBarriers(t testing.TB, c *mpi.Communicator, ctx context.Context, busy, iterations int, lateBy time.Duration) time.Duration {
	var stop atomic.Bool
	var wg sync.WaitGroup
	if c.Rank() == 0 || lateBy == 0 {
		for range busy {
			wg.Go(func() {
				for !stop.Load() {
				}
			})
		}
	}
	defer wg.Wait()
	defer stop.Store(true)
	require.NoError(t, c.Barrier(ctx))
	var waited time.Duration
	for range iterations {
		if c.Rank() != 0 {
			for start := time.Now(); time.Since(start) < lateBy; {
			}
		}
		start := time.Now()
		require.NoError(t, c.Barrier(ctx))
		waited += time.Since(start)
	}
	return waited
}

// TestMPIIntegerReductionsWrapAround checks every operator on every integer type
// against the Go reference (two's complement wrap-around, NCCL's results; Avg is the
// wrapped sum divided by the number of ranks, truncated) at counts 1 to 4096, with
// values over the whole range so that sums and products overflow. Open MPI's AVX
// component saturated 8-bit sums from 16 elements (uint8: 200+200 gave 255).
func TestMPIIntegerReductionsWrapAround(t *testing.T) {
	if inRank(t) {
		mpiRankIntegerReductionsWrapAround(t)
		return
	}
	for _, np := range []int{2, 4} {
		t.Run(fmt.Sprint(np, "-ranks"), func(t *testing.T) {
			runMPI(t, np, "TestMPIIntegerReductionsWrapAround")
		})
	}
}

func mpiRankIntegerReductionsWrapAround(t *testing.T) {
	c := newMPI(t)
	defer func() { require.NoError(t, c.Close()) }()
	var counts []int
	for n := 1; n <= 4096; n++ {
		if n <= 64 || n%61 == 0 || n >= 4094 || n&(n-1) == 0 {
			counts = append(counts, n)
		}
	}
	wrapCheck[int8](t, c, comm.Int8, counts)
	wrapCheck[uint8](t, c, comm.Uint8, counts)
	wrapCheck[int32](t, c, comm.Int32, counts)
	wrapCheck[uint32](t, c, comm.Uint32, counts)
	wrapCheck[int64](t, c, comm.Int64, counts)
	wrapCheck[uint64](t, c, comm.Uint64, counts)

	// The case: 2 x 200 in uint8, 16 elements and more.
	v, p := hostBuf[uint8](t, 64)
	for i := range v {
		v[i] = 200
	}
	require.NoError(t, c.AllReduce(p, len(v), comm.Uint8, comm.Sum))
	assert.Equal(t, uint8(200*c.WorldSize()), v[63])
}

func wrapCheck[T int8 | uint8 | int32 | uint32 | int64 | uint64](t *testing.T, c *mpi.Communicator, dt comm.DType, counts []int) {
	n := c.WorldSize()
	for _, op := range []comm.ReduceOp{comm.Sum, comm.Prod, comm.Max, comm.Min, comm.Avg} {
		bad := 0
		for _, count := range counts {
			in := make([][]T, n)
			for r := range n {
				rng := rand.New(rand.NewPCG(uint64(count), uint64(r)<<8|uint64(op)))
				in[r] = make([]T, count)
				for i := range in[r] {
					in[r][i] = T(rng.Uint64())
				}
			}
			want := append([]T(nil), in[0]...)
			for r := 1; r < n; r++ {
				for i, x := range in[r] {
					switch op {
					case comm.Prod:
						want[i] *= x
					case comm.Max:
						want[i] = max(want[i], x)
					case comm.Min:
						want[i] = min(want[i], x)
					default:
						want[i] += x
					}
				}
			}
			if op == comm.Avg {
				for i, s := range want {
					if T(0)-1 < 0 { // signed
						want[i] = T(int64(s) / int64(n))
					} else {
						want[i] = T(uint64(s) / uint64(n))
					}
				}
			}
			got, p := hostBuf[T](t, count)
			copy(got, in[c.Rank()])
			require.NoError(t, c.AllReduce(p, count, dt, op))
			for i := range got {
				if got[i] != want[i] && bad < 5 {
					bad++
					t.Errorf("%v %v count %d element %d: %v, want %v", dt, op, count, i, got[i], want[i])
				}
			}
		}
	}
}

// TestMPITruncatedRecvKeepsItsCause checks that a receive shorter than the message
// fails Sync with the request it was (receive, peer, tag, bytes) and MPI's own error
// (MPI_ERR_TRUNCATE, read from the statuses), not MPI_ERR_IN_STATUS alone.
func TestMPITruncatedRecvKeepsItsCause(t *testing.T) {
	if inRank(t) {
		mpiRankTruncatedRecvKeepsItsCause(t)
		return
	}
	runMPI(t, 2, t.Name())
}

func mpiRankTruncatedRecvKeepsItsCause(t *testing.T) {
	c := newMPI(t)
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if c.Rank() == 0 {
		_, p := hostBuf[int32](t, 8)
		require.NoError(t, c.Send(p, 1, comm.Int32, 1, 6))
		require.NoError(t, c.Send(p, 8, comm.Int32, 1, 5))
		require.NoError(t, c.Sync(ctx))
	} else {
		_, po := hostBuf[int32](t, 1)
		require.NoError(t, c.Recv(po, 1, comm.Int32, 0, 6)) // completes
		_, p := hostBuf[int32](t, 4)
		require.NoError(t, c.Recv(p, 4, comm.Int32, 0, 5))
		err := c.Sync(ctx)
		require.Error(t, err)
		var code rawmpi.ErrorCode
		require.ErrorAs(t, err, &code)
		assert.Equal(t, rawmpi.ErrorCode(rawmpi.ErrTruncate), code, "%v", err)
		assert.Contains(t, err.Error(), "recv of 16 bytes from rank 0 with tag 5 (request 2 of 2)")
		assert.NotContains(t, err.Error(), "request 1 of 2", "the completed request is no error")
	}
	require.NoError(t, c.Barrier(ctx))
}

// TestMPISlices runs the slice functions on 2 and 4 ranks: every collective, and a ring
// of Send and Recv completed by Sync after garbage collections (the library keeps the
// pending slices pinned).
func TestMPISlices(t *testing.T) {
	if inRank(t) {
		mpiRankSlices(t)
		return
	}
	for _, np := range []int{2, 4} {
		t.Run(fmt.Sprint(np, "-ranks"), func(t *testing.T) { runMPI(t, np, "TestMPISlices") })
	}
}

func mpiRankSlices(t *testing.T) {
	c := newMPI(t)
	defer func() { require.NoError(t, c.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, n := c.Rank(), c.WorldSize()

	v := []float64{float64(r), 1}
	require.NoError(t, mpi.AllReduce(c, v, comm.Sum))
	assert.Equal(t, []float64{float64(n * (n - 1) / 2), float64(n)}, v)

	out := make([]int32, 2)
	require.NoError(t, mpi.AllReduceInto(c, []int32{int32(r), -int32(r)}, out, comm.Max))
	assert.Equal(t, []int32{int32(n - 1), 0}, out)

	b := []uint64{uint64(r), uint64(r)}
	require.NoError(t, mpi.Broadcast(c, b, n-1))
	assert.Equal(t, []uint64{uint64(n - 1), uint64(n - 1)}, b)

	all := make([]int8, 2*n)
	require.NoError(t, mpi.AllGather(c, []int8{int8(r), int8(-r)}, all))
	for i := range n {
		assert.Equal(t, []int8{int8(i), int8(-i)}, all[2*i:2*i+2])
	}

	send := make([]float32, n)
	for i := range send {
		send[i] = float32(i * r)
	}
	mine := make([]float32, 1)
	require.NoError(t, mpi.ReduceScatter(c, send, mine, comm.Sum))
	assert.Equal(t, float32(r*n*(n-1)/2), mine[0])

	// A ring: the slices go out of scope here, only the library holds them.
	func() {
		require.NoError(t, mpi.Send(c, []uint32{uint32(r), 7, 8}, (r+1)%n, 3))
	}()
	in := make([]uint32, 3)
	require.NoError(t, mpi.Recv(c, in, (r+n-1)%n, 3))
	runtime.GC()
	runtime.GC()
	require.NoError(t, c.Sync(ctx))
	assert.Equal(t, []uint32{uint32((r + n - 1) % n), 7, 8}, in)
	require.NoError(t, c.Barrier(ctx))
}

// TestMPINoNCCLErrorKeepsItsCause brings NCCL up over MPI with NCCLGO_LIBNCCL naming a
// missing file whose path is longer than 255 bytes: every rank's error must carry the
// whole path and match raw/nccl's ErrLibraryNotFound (and not raw/cuda's).
func TestMPINoNCCLErrorKeepsItsCause(t *testing.T) {
	if inRank(t) {
		mpiRankNoNCCLErrorKeepsItsCause(t)
		return
	}
	runMPI(t, 2, t.Name(), "NCCLGO_LIBNCCL="+missingNCCL)
}

var missingNCCL = "/nonexistent/" + strings.Repeat("long-folder-name/", 20) + "libnccl.so.2"

func mpiRankNoNCCLErrorKeepsItsCause(t *testing.T) {
	c := newMPI(t)
	defer func() { require.NoError(t, c.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.BootstrapNCCL(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, rawnccl.ErrLibraryNotFound, "rank %d: %v", c.Rank(), err)
	assert.NotErrorIs(t, err, rawcuda.ErrLibraryNotFound, "rank %d: a missing nccl is no missing cuda driver", c.Rank())
	assert.Contains(t, err.Error(), missingNCCL, "rank %d: the whole message", c.Rank())
	require.NoError(t, c.Barrier(ctx))
}

// TestMPISignedZeroMinMax checks the one rule of every floating type for signed zeros:
// Min(-0, +0) is -0 and Max(-0, +0) is +0, whichever rank holds which (float32 and
// float64 gave +0 for both through MPI's own operators, bfloat16 -0).
func TestMPISignedZeroMinMax(t *testing.T) {
	if inRank(t) {
		mpiRankSignedZeroMinMax(t)
		return
	}
	for _, np := range []int{2, 4} {
		t.Run(fmt.Sprint(np, "-ranks"), func(t *testing.T) { runMPI(t, np, "TestMPISignedZeroMinMax") })
	}
}

func mpiRankSignedZeroMinMax(t *testing.T) {
	c := newMPI(t)
	defer func() { require.NoError(t, c.Close()) }()
	negZero := math.Copysign(0, -1)
	first := c.Rank() == 0
	for _, tc := range []struct {
		dt     comm.DType
		encode func(float64) []byte
		decode func([]byte) float64
	}{
		{comm.Float32, func(v float64) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(v))) },
			func(b []byte) float64 { return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))) }},
		{comm.Float64, func(v float64) []byte { return binary.LittleEndian.AppendUint64(nil, math.Float64bits(v)) },
			func(b []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b)) }},
		{comm.BFloat16, func(v float64) []byte {
			return binary.LittleEndian.AppendUint16(nil, kernels.Float32ToBF16(float32(v)))
		},
			func(b []byte) float64 { return float64(kernels.BF16ToFloat32(binary.LittleEndian.Uint16(b))) }},
		{comm.Float16, func(v float64) []byte { return binary.LittleEndian.AppendUint16(nil, kernels.Float32ToF16(float32(v))) },
			func(b []byte) float64 { return float64(kernels.F16ToFloat32(binary.LittleEndian.Uint16(b))) }},
	} {
		for _, op := range []comm.ReduceOp{comm.Min, comm.Max} {
			es := tc.dt.Size()
			buf, p := hostBuf[byte](t, 2*es)
			// Element 0: -0 on rank 0, +0 elsewhere; element 1 the other way round.
			a, b := 0.0, negZero
			if first {
				a, b = negZero, 0.0
			}
			copy(buf, tc.encode(a))
			copy(buf[es:], tc.encode(b))
			require.NoError(t, c.AllReduce(p, 2, tc.dt, op))
			wantNeg := op == comm.Min
			for i := range 2 {
				got := tc.decode(buf[i*es : (i+1)*es])
				assert.True(t, got == 0 && math.Signbit(got) == wantNeg, "%v %v element %d: %v (sign bit %v)", tc.dt, op, i, got, math.Signbit(got))
			}
		}
	}
}

// TestMPIQuietStart checks that New at GOMAXPROCS 1 without WithMinGOMAXPROCS logs
// nothing at Info (every rank of every job said so at start); the notice is at Debug.
func TestMPIQuietStart(t *testing.T) {
	if inRank(t) {
		mpiRankQuietStart(t)
		return
	}
	runMPI(t, 2, t.Name())
}

func mpiRankQuietStart(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var info, debug strings.Builder
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := mpi.New(ctx, mpi.WithLogger(slog.New(slog.NewTextHandler(lockedWriter{&mu, &info}, nil))))
	require.NoError(t, err)
	c2, err := mpi.New(ctx, mpi.WithLogger(slog.New(slog.NewTextHandler(lockedWriter{&mu, &debug}, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	require.NoError(t, err)
	mu.Lock()
	assert.Empty(t, info.String(), "nothing at Info")
	assert.Contains(t, debug.String(), "level=DEBUG", "the notice is still there at Debug")
	mu.Unlock()
	require.NoError(t, c2.Close())
	require.NoError(t, c.Close())
}

// TestNCCLTimeoutIsNoMPIOption checks that mpi.New cannot be given NCCL's WithTimeout,
// which it would ignore: an nccl.Option is not an mpi.Option, so
// mpi.New(ctx, nccl.WithTimeout(d)) does not compile (NewNCCL takes and honours it).
func TestNCCLTimeoutIsNoMPIOption(t *testing.T) {
	opt := reflect.TypeOf(nccl.WithTimeout(time.Second))
	mpiOpt := reflect.TypeFor[mpi.Option]()
	assert.False(t, opt.AssignableTo(mpiOpt))
	assert.False(t, opt.ConvertibleTo(mpiOpt))
}

// BenchmarkMPIRankBarrierBusy times Barrier at GOMAXPROCS 1 with 0, 1 and 64 busy
// goroutines: on every rank, all arriving together (late=0s), and on rank 0 with the
// others arriving 2 ms late (late=2ms: rank 0 waits), in the same run; compare rank
// 0's rows (wait-ns/op is the time in Barrier). It runs on the
// ranks of an mpirun job, with a fixed iteration count so that every rank makes the
// same calls:
//
//	go test -c -o /tmp/mpi.test ./comm/mpi
//	NCCLGO_MPI_RANK_TEST=BenchmarkMPIRankBarrierBusy mpirun --oversubscribe \
//	  --allow-run-as-root -np 2 -x NCCLGO_MPI_RANK_TEST /tmp/mpi.test -test.run='^$' \
//	  -test.bench=BenchmarkMPIRankBarrierBusy -test.benchtime=100x
func BenchmarkMPIRankBarrierBusy(b *testing.B) {
	if os.Getenv(mpiChildEnv) != b.Name() {
		b.Skipf("%s runs on the ranks of an mpirun job; see its doc comment for the command", b.Name())
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := mpi.New(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, late := range []time.Duration{0, 2 * time.Millisecond} {
		for _, busy := range []int{0, 1, 64} {
			b.Run(fmt.Sprintf("late=%v/busy=%d", late, busy), func(b *testing.B) {
				b.ReportMetric(float64(lateBarriers(b, c, ctx, busy, b.N, late))/float64(b.N), "wait-ns/op")
			})
		}
	}
}
