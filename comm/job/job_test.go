package job

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/fakegpu"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/leaktest"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
	"github.com/ncclgo/ncclgo/comm/internal/nettest"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

var quietLog = slog.New(slog.DiscardHandler)

var quiet = WithLogger(quietLog)

// idFake is the fake driver with ncclGetUniqueId returning random ids, as NCCL does.
type idFake struct{ *fakegpu.Driver }

func newIDFake() idFake { return idFake{fakegpu.New()} }

func (idFake) GetUniqueID() (gpulib.UniqueID, error) {
	var id gpulib.UniqueID
	_, _ = rand.Read(id[:])
	return id, nil
}

// initIDs returns the ids the rank's communicators were initialised with, in order.
func (f idFake) initIDs() []gpulib.UniqueID {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return append([]gpulib.UniqueID(nil), f.Ids...)
}

// withDevice makes bring-up use d, through the hook comm/commtest uses.
func withDevice(d gpulib.Driver) Option {
	return WithNCCL(nccl.WithElementType(comm.BFloat16), ncclcfg.WithDriver(d))
}

// freePort returns a loopback TCP port reserved for the test: nothing listens on it
// until the test does, and no other process takes it meanwhile.
func freePort(t testing.TB) int { return nettest.Port(t) }

func jobOf(port, rank, world int) rendezvous.Config {
	return rendezvous.Config{MasterAddr: "127.0.0.1", MasterPort: port, Rank: rank, WorldSize: world, LocalRank: rank}
}

// waitCount waits until the counter under key (the arrivals of a generation) reads n.
func waitCount(t *testing.T, s rendezvous.Store, key string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := strconv.Itoa(n)
	require.Eventually(t, func() bool {
		present, err := s.Check(ctx, key)
		if err != nil || !present[0] {
			return false
		}
		v, err := s.Get(ctx, key)
		return err == nil && string(v) == want
	}, time.Minute, time.Millisecond, "%d arrivals counted under %s", n, key)
}

// joinAll joins ranks of a world-rank job on port, each with its own fake device.
func joinAll(t *testing.T, port, world int, ranks ...int) (map[int]*Job, map[int]idFake) {
	t.Helper()
	jobs, fakes := map[int]*Job{}, map[int]idFake{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	for _, r := range ranks {
		f := newIDFake()
		j, err := JoinJob(ctx, WithJob(jobOf(port, r, world)), withDevice(f), quiet)
		require.NoError(t, err, "rank %d", r)
		t.Cleanup(func() { _ = j.Close() })
		jobs[r], fakes[r] = j, f
	}
	return jobs, fakes
}

// onRanks runs f for every rank concurrently.
func onRanks[T any](ranks []int, f func(rank int) (T, error)) (map[int]T, map[int]error) {
	var mu sync.Mutex
	vals, errs := map[int]T{}, map[int]error{}
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() {
			v, err := f(r)
			mu.Lock()
			vals[r], errs[r] = v, err
			mu.Unlock()
		})
	}
	wg.Wait()
	return vals, errs
}

func closeAll[T interface{ Close() error }](t *testing.T, m map[int]T) {
	t.Helper()
	for r, b := range m {
		assert.NoError(t, b.Close(), "close rank %d", r)
	}
}

func TestConnectGivesEveryRankRankZerosUniqueID(t *testing.T) {
	leaktest.Check(t)
	const world = 3
	port := freePort(t)
	fakes := map[int]idFake{0: newIDFake(), 1: newIDFake(), 2: newIDFake()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	ranks := []int{2, 1, 0} // the store's server starts last: the others retry
	bs, errs := onRanks(ranks, func(r int) (*nccl.Backend, error) {
		return Connect(ctx, WithJob(jobOf(port, r, world)), withDevice(fakes[r]), quiet, WithNCCL(nccl.WithElementType(comm.Float32)))
	})
	for _, r := range ranks {
		require.NoError(t, errs[r], "rank %d", r)
	}
	defer closeAll(t, bs)
	want := fakes[0].initIDs()
	require.Len(t, want, 1)
	assert.NotEqual(t, gpulib.UniqueID{}, want[0])
	for _, r := range ranks {
		assert.Equal(t, want, fakes[r].initIDs(), "rank %d initialised with rank 0's id", r)
		assert.Equal(t, r, bs[r].Rank())
		assert.Equal(t, world, bs[r].WorldSize())
		assert.Equal(t, comm.Float32, bs[r].ElementType())
		assert.Equal(t, uint64(0), memberOf(bs[r]).generation())
		assert.Equal(t, []string{"CommInitRank(3," + strconv.Itoa(r) + ",false)"}, fakes[r].Named("CommInitRank"),
			"a non-blocking communicator")
	}
}

func TestBringUpNamesTheMissingRankAndTheNextGenerationSucceeds(t *testing.T) {
	leaktest.Check(t)
	const world = 3
	port := freePort(t)
	jobs, fakes := joinAll(t, port, world, 0, 1, 2) // rank 2 joins the job but never comes

	// The deadline passes once ranks 0 and 1 have arrived, however slow the machine.
	ctx, expire := nettest.ExpiringContext()
	defer expire()
	failed := make(chan map[int]error, 1)
	go func() {
		_, errs := onRanks([]int{0, 1}, func(r int) (*nccl.Backend, error) { return jobs[r].NewNCCL(ctx) })
		failed <- errs
	}()
	waitCount(t, jobs[0].Store(), rendezvous.GenerationKey(defaultGroup, 0, "count"), 2)
	expire()
	errs := <-failed
	for _, r := range []int{0, 1} {
		err := errs[r]
		var be *rendezvous.BarrierError
		require.ErrorAs(t, err, &be, "rank %d", r)
		assert.Equal(t, []int{2}, be.Missing, "rank %d", r)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "rank %d", r)
		assert.Contains(t, err.Error(), "1 of 3 ranks missing: [2]", "rank %d", r)
		assert.Contains(t, err.Error(), "generation 0", "rank %d", r)
		assert.Empty(t, fakes[r].Named("CommInitRank"), "rank %d: no communicator without the id", r)
	}

	// Everyone tries again: rank 2 skips the abandoned generation 0.
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel2()
	bs, errs := onRanks([]int{0, 1, 2}, func(r int) (*nccl.Backend, error) { return jobs[r].NewNCCL(ctx2) })
	for r := range world {
		require.NoError(t, errs[r], "rank %d", r)
	}
	defer closeAll(t, bs)
	want := fakes[0].initIDs()
	for r := range world {
		assert.Equal(t, uint64(1), memberOf(bs[r]).generation(), "rank %d", r)
		assert.Equal(t, want, fakes[r].initIDs(), "rank %d", r)
	}
}

// A process that restarts after it arrived in a generation closes that generation; the
// ranks waiting there move on to the next one with it.
func TestARestartedRankMovesTheWaitingRanksToTheNextGeneration(t *testing.T) {
	leaktest.Check(t)
	const world = 3
	port := freePort(t)
	jobs, fakes := joinAll(t, port, world, 0, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	store := jobs[0].Store()
	key := func(name string) string { return rendezvous.GenerationKey(defaultGroup, 0, name) }
	// The first incarnation of rank 1 arrived in generation 0 and died.
	_, _, err := store.CompareAndSet(ctx, key("rank/1"), nil, []byte{1})
	require.NoError(t, err)
	_, err = store.Add(ctx, key("count"), 1)
	require.NoError(t, err)

	var wg sync.WaitGroup
	bs := map[int]*nccl.Backend{}
	errs := map[int]error{}
	var mu sync.Mutex
	connect := func(r int, j *Job) {
		wg.Go(func() {
			b, err := j.NewNCCL(ctx)
			mu.Lock()
			bs[r], errs[r] = b, err
			mu.Unlock()
		})
	}
	connect(0, jobs[0])
	require.Eventually(t, func() bool {
		v, err := store.Get(ctx, key("count"))
		return err == nil && string(v) == "2"
	}, time.Minute, time.Millisecond, "rank 0 arrives")

	restarted, fakes1 := joinAll(t, port, world, 1)
	fakes[1] = fakes1[1]
	connect(1, restarted[1])
	state, err := store.Get(ctx, key("state"))
	require.NoError(t, err)
	assert.Contains(t, string(state), "rank 1 had arrived before")
	connect(2, jobs[2])
	wg.Wait()
	for r := range world {
		require.NoError(t, errs[r], "rank %d", r)
		assert.Equal(t, uint64(1), memberOf(bs[r]).generation(), "rank %d", r)
		assert.Equal(t, fakes[0].initIDs(), fakes[r].initIDs(), "rank %d", r)
	}
	closeAll(t, bs)
}

func TestAttemptReconnectMeetsAReplacementInTheNextGeneration(t *testing.T) {
	leaktest.Check(t)
	const world = 3
	port := freePort(t)
	fakes := map[int]idFake{0: newIDFake(), 1: newIDFake(), 2: newIDFake()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	connect := func(r int) (*nccl.Backend, error) {
		return Connect(ctx, WithJob(jobOf(port, r, world)), withDevice(fakes[r]), quiet)
	}
	bs, errs := onRanks([]int{0, 1, 2}, connect)
	for r := range world {
		require.NoError(t, errs[r], "rank %d", r)
	}
	first := fakes[0].initIDs()[0]

	// Rank 2 dies; the survivors see a remote error.
	require.NoError(t, bs[2].Close())
	for _, r := range []int{0, 1} {
		fakes[r].AsyncErr.Store(int32(gpulib.RemoteError))
		require.False(t, bs[r].IsHealthy(), "rank %d", r)
		fakes[r].AsyncErr.Store(int32(gpulib.Success))
		assert.False(t, bs[r].IsHealthy(), "rank %d stays unhealthy until it reconnects", r)
	}
	fakes[2] = newIDFake()
	_, errs = onRanks([]int{0, 1, 2}, func(r int) (struct{}, error) {
		if r == 2 {
			b, err := connect(2)
			bs[2] = b
			return struct{}{}, err
		}
		return struct{}{}, bs[r].AttemptReconnect(ctx)
	})
	for r := range world {
		require.NoError(t, errs[r], "rank %d", r)
		assert.True(t, bs[r].IsHealthy(), "rank %d", r)
		assert.Equal(t, uint64(1), memberOf(bs[r]).generation(), "rank %d", r)
	}
	second := fakes[0].initIDs()[1]
	assert.NotEqual(t, first, second, "a new id for the new generation")
	assert.Equal(t, []gpulib.UniqueID{first, second}, fakes[1].initIDs())
	assert.Equal(t, []gpulib.UniqueID{second}, fakes[2].initIDs())
	closeAll(t, bs)
}

func TestAttemptReconnectNamesTheRanksThatDoNotCome(t *testing.T) {
	leaktest.Check(t)
	const world = 2
	port := freePort(t)
	jobs, fakes := joinAll(t, port, world, 0, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	bs, errs := onRanks([]int{0, 1}, func(r int) (*nccl.Backend, error) { return jobs[r].NewNCCL(ctx) })
	require.NoError(t, errors.Join(errs[0], errs[1]))
	defer closeAll(t, bs)

	fakes[0].AsyncErr.Store(int32(gpulib.SystemError))
	require.False(t, bs[0].IsHealthy())
	// The deadline passes once rank 0 has arrived in generation 1, however slow the
	// machine.
	short, expire := nettest.ExpiringContext()
	defer expire()
	reconnected := make(chan error, 1)
	go func() { reconnected <- bs[0].AttemptReconnect(short) }()
	waitCount(t, jobs[0].Store(), rendezvous.GenerationKey(defaultGroup, 1, "count"), 1)
	expire()
	err := <-reconnected
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var be *rendezvous.BarrierError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, []int{1}, be.Missing)
	assert.Contains(t, err.Error(), "attempt-reconnect on rank 0: rendezvous: generation 1")
	assert.False(t, bs[0].IsHealthy())
	assert.ErrorIs(t, bs[0].AllReduce(p, 8), comm.ErrUnhealthy)
	assert.Equal(t, []string{"CommAbort(101)"}, fakes[0].Named("CommAbort"), "the failed communicator is aborted once")
}

// Close does not wait for a reconnect whose peers never come: it ends the rendezvous.
func TestCloseEndsAReconnectWaitingForDeadPeers(t *testing.T) {
	leaktest.Check(t)
	port := freePort(t)
	jobs, fakes := joinAll(t, port, 2, 0, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	bs, errs := onRanks([]int{0, 1}, func(r int) (*nccl.Backend, error) { return jobs[r].NewNCCL(ctx) })
	require.NoError(t, errors.Join(errs[0], errs[1]))
	require.NoError(t, bs[1].Close()) // rank 1 is gone for good
	fakes[0].AsyncErr.Store(int32(gpulib.RemoteError))
	require.False(t, bs[0].IsHealthy())

	long, cancelLong := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLong()
	done := make(chan error, 1)
	go func() { done <- bs[0].AttemptReconnect(long) }()
	require.Eventually(t, func() bool {
		ok, err := jobs[0].Store().Check(ctx, rendezvous.GenerationKey(defaultGroup, 1, "rank/0"))
		return err == nil && ok[0]
	}, time.Minute, time.Millisecond, "rank 0 waits in generation 1")
	require.NoError(t, bs[0].Close())
	err := <-done
	assert.ErrorIs(t, err, context.Canceled)
	assert.NoError(t, long.Err(), "ended by Close, not by its own context")
}

func TestConnectClosesItsJobAndItsStore(t *testing.T) {
	leaktest.Check(t)
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	b, err := Connect(ctx, WithJob(jobOf(port, 0, 1)), withDevice(newIDFake()), quiet)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err, "rank 0's store no longer listens")
	require.NoError(t, l.Close())
	assert.ErrorIs(t, b.Close(), comm.ErrClosed)
}

func TestJobRejectsBadSettings(t *testing.T) {
	port := freePort(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	tests := []struct {
		name string
		env  map[string]string
		opts []Option
		is   error
		msg  string
	}{
		{name: "no environment", env: map[string]string{"MASTER_ADDR": "", "MASTER_PORT": "", "RANK": "", "WORLD_SIZE": ""},
			is: rendezvous.ErrInvalidConfig, msg: "MASTER_ADDR is not set"},
		{name: "rank outside the world", env: map[string]string{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400", "RANK": "4", "WORLD_SIZE": "2", "LOCAL_RANK": "0"},
			is: rendezvous.ErrInvalidConfig, msg: `RANK="4": must be less than WORLD_SIZE (2)`},
		{name: "store port not a number", env: map[string]string{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400", "RANK": "0", "WORLD_SIZE": "1", EnvStorePort: "x1"},
			is: rendezvous.ErrInvalidConfig, msg: `NCCLGO_STORE_PORT="x1": not an integer`},
		{name: "store port out of range", env: map[string]string{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400", "RANK": "0", "WORLD_SIZE": "1", EnvStorePort: "0"},
			is: rendezvous.ErrInvalidConfig, msg: `MASTER_PORT="0": must be in 1..65535`},
		{name: "bad WithJob", opts: []Option{WithJob(rendezvous.Config{MasterAddr: "127.0.0.1", MasterPort: 70000, WorldSize: 1})},
			is: rendezvous.ErrInvalidConfig, msg: `MASTER_PORT="70000"`},
		{name: "port in use", opts: []Option{WithJob(jobOf(busyPort, 0, 2))}, msg: "address already in use"},
		{name: "external store absent", opts: []Option{WithJob(jobOf(port, 0, 2)), WithExternalStore()}, is: context.DeadlineExceeded,
			msg: "no server ever listened at 127.0.0.1:" + strconv.Itoa(port)},
		{name: "rank 0 never serves", opts: []Option{WithJob(jobOf(port, 1, 2))}, is: context.DeadlineExceeded,
			msg: "join job as rank 1 of 2: dial 127.0.0.1:" + strconv.Itoa(port) + ": rank 0 never served the store at 127.0.0.1:" + strconv.Itoa(port)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			j, err := JoinJob(short(), append(tt.opts, quiet)...)
			require.Error(t, err)
			assert.Nil(t, j)
			if tt.is != nil {
				assert.ErrorIs(t, err, tt.is)
			}
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}

func TestJobServesTheStoreOnNCCLGOStorePort(t *testing.T) {
	port := freePort(t)
	t.Setenv(rendezvous.EnvMasterAddr, "127.0.0.1")
	t.Setenv(rendezvous.EnvMasterPort, "1") // torchrun's agent store would be there
	t.Setenv(rendezvous.EnvRank, "0")
	t.Setenv(rendezvous.EnvWorldSize, "1")
	t.Setenv(EnvStorePort, strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	b, err := Connect(ctx, withDevice(newIDFake()), quiet)
	require.NoError(t, err)
	defer b.Close()
	c, err := rendezvous.Dial(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err)
	defer c.Close()
	state, err := c.Get(ctx, rendezvous.GenerationKey(defaultGroup, 0, "state"))
	require.NoError(t, err)
	assert.Equal(t, "ok", string(state))
}

// In a LeaderWorkerSet pod (no MASTER_ADDR: the leader's address is LWS_LEADER_ADDRESS)
// with NCCLGO_STORE_PORT, Connect serves the store on the leader's address and that port.
func TestJobConnectsInALeaderWorkerSetPod(t *testing.T) {
	port := freePort(t)
	for _, k := range []string{rendezvous.EnvMasterAddr, rendezvous.EnvMasterPort, rendezvous.EnvRank, rendezvous.EnvWorldSize, rendezvous.EnvLocalRank} {
		t.Setenv(k, "")
	}
	t.Setenv(rendezvous.EnvLWSLeaderAddress, "127.0.0.1")
	t.Setenv(rendezvous.EnvLWSGroupSize, "1")
	t.Setenv(rendezvous.EnvLWSWorkerIndex, "0")
	t.Setenv(EnvStorePort, strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Connect(ctx, withDevice(newIDFake()), quiet)
	require.NoError(t, err)
	defer b.Close()
	c, err := rendezvous.Dial(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err)
	defer c.Close()
	state, err := c.Get(ctx, rendezvous.GenerationKey(defaultGroup, 0, "state"))
	require.NoError(t, err)
	assert.Equal(t, "ok", string(state))
}

func TestJobRefusesAWrongToken(t *testing.T) {
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	cfg := jobOf(port, 0, 2)
	cfg.Token = "secret"
	j0, err := JoinJob(ctx, WithJob(cfg), quiet)
	require.NoError(t, err)
	defer j0.Close()
	cfg = jobOf(port, 1, 2)
	cfg.Token = "guess"
	_, err = JoinJob(ctx, WithJob(cfg), quiet)
	assert.ErrorIs(t, err, rendezvous.ErrUnauthorized)
}

func TestJobWithAnExternalStore(t *testing.T) {
	leaktest.Check(t)
	port := freePort(t)
	srv := rendezvous.NewServer(rendezvous.WithLogger(quietLog))
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(context.Background(), l) }()
	defer func() { _ = srv.Close(); <-served }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	fakes := map[int]idFake{0: newIDFake(), 1: newIDFake()}
	bs, errs := onRanks([]int{0, 1}, func(r int) (*nccl.Backend, error) {
		return Connect(ctx, WithJob(jobOf(port, r, 2)), WithExternalStore(), withDevice(fakes[r]), quiet)
	})
	require.NoError(t, errors.Join(errs[0], errs[1]))
	assert.Equal(t, fakes[0].initIDs(), fakes[1].initIDs())
	closeAll(t, bs)

	// A second job on the same store, under another name, starts at generation 0; the
	// same name continues after the first job's generations.
	for _, tt := range []struct {
		name string
		gen  uint64
	}{{"other", 0}, {"", 1}} {
		bs, errs = onRanks([]int{0, 1}, func(r int) (*nccl.Backend, error) {
			return Connect(ctx, WithJob(jobOf(port, r, 2)), WithExternalStore(), withDevice(newIDFake()), WithNCCL(nccl.WithName(tt.name)), quiet)
		})
		require.NoError(t, errors.Join(errs[0], errs[1]), tt.name)
		for r, b := range bs {
			assert.Equal(t, tt.gen, memberOf(b).generation(), "%q rank %d", tt.name, r)
		}
		closeAll(t, bs)
	}
}

func TestJobAfterClose(t *testing.T) {
	port := freePort(t)
	jobs, _ := joinAll(t, port, 1, 0)
	require.NoError(t, jobs[0].Close())
	_, err := jobs[0].NewNCCL(context.Background())
	assert.ErrorIs(t, err, comm.ErrClosed)
	assert.ErrorIs(t, jobs[0].Close(), comm.ErrClosed)
}

func TestJobDevicePicksTheLocalRank(t *testing.T) {
	for _, tt := range []struct {
		opts  []nccl.Option
		local int
		want  int
	}{{nil, 3, 3}, {[]nccl.Option{nccl.WithDevice(1)}, 3, 1}, {[]nccl.Option{nccl.WithDevice(0)}, 5, 0}} {
		assert.Equal(t, tt.want, ncclcfg.JobDevice(ncclcfg.New(tt.opts), tt.local), fmt.Sprint(tt))
	}
}

func TestShrunkRank(t *testing.T) {
	for _, tt := range []struct {
		rank    int
		exclude []int
		want    int
	}{{0, nil, 0}, {3, []int{1}, 2}, {3, []int{4, 0, 1}, 1}, {1, []int{1}, -1}, {5, []int{2, 2}, 4}} {
		assert.Equal(t, tt.want, nccl.ShrunkRank(tt.rank, tt.exclude), fmt.Sprint(tt.rank, tt.exclude))
	}
}

// A token-protected job's store refuses torch clients (torch's protocol has no
// authentication) unless WithTorchClients(true); with it a torch client sets and gets
// keys that the job's ranks see.
func TestJobStoreAnswersTorchClientsOnlyWhenAllowed(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
		want bool
	}{
		{"token, no option", nil, false},
		{"token, WithTorchClients(true)", []Option{WithTorchClients(true)}, true},
		{"token, WithTorchClients(false)", []Option{WithTorchClients(false)}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			port := freePort(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cfg := jobOf(port, 0, 1)
			cfg.Token = "a-token-long-enough-for-the-server"
			j, err := JoinJob(ctx, append([]Option{WithJob(cfg), quiet}, tt.opts...)...)
			require.NoError(t, err)
			defer j.Close()
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			for _, gen := range []rendezvous.TorchProtocol{rendezvous.TorchProtocol1, rendezvous.TorchProtocol2} {
				// A refused client dials again until its context ends: the context ends
				// once an attempt has been refused (no timer, which a loaded machine can
				// outrun mid-attempt), and the error then carries that refusal. An
				// allowed client has the test's hang guard.
				tctx, tcancel := context.WithCancel(ctx)
				log := quietLog
				if !tt.want {
					var expire func()
					tctx, expire = nettest.ExpiringContext()
					context.AfterFunc(ctx, expire) // the hang guard
					log = slog.New(onRecord(func(msg string, attrs map[string]string) {
						if strings.HasSuffix(attrs["err"], ": EOF") {
							expire()
						}
					}))
				}
				tc, err := rendezvous.DialTCPStore(tctx, addr, rendezvous.WithTorchProtocol(gen), rendezvous.WithLogger(log))
				key := "torch/" + strconv.Itoa(int(gen))
				if err == nil {
					err = tc.Set(tctx, key, []byte("from python"))
					if err == nil {
						var v []byte
						v, err = tc.Get(tctx, key)
						if err == nil {
							assert.Equal(t, "from python", string(v))
						}
					}
					_ = tc.Close()
				}
				tcancel()
				if !tt.want {
					require.Error(t, err, "a torch client (protocol %d) used a token-protected store", gen)
					assert.Contains(t, err.Error(), "handshake with "+addr+": EOF", "the store closed the torch client's connection")
					continue
				}
				require.NoError(t, err, "protocol %d", gen)
				// The job's own client (with the token) sees the torch client's key.
				c, err := rendezvous.Dial(ctx, addr, rendezvous.WithToken(cfg.Token))
				require.NoError(t, err)
				v, err := c.Get(ctx, key)
				require.NoError(t, err)
				assert.Equal(t, "from python", string(v))
				require.NoError(t, c.Close())
			}
		})
	}
}

// The store rank 0 serves takes a connection from every rank of a job larger than a
// server's default limit of connections.
func TestJobOfMoreRanksThanTheDefaultConnectionLimit(t *testing.T) {
	leaktest.Check(t)
	world := rendezvous.DefaultMaxConns + 64
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ranks := make([]int, world)
	for r := range ranks {
		ranks[r] = r
	}
	jobs, errs := onRanks(ranks, func(r int) (*Job, error) {
		return JoinJob(ctx, WithJob(jobOf(port, r, world)), withDevice(newIDFake()), quiet)
	})
	for r, j := range jobs {
		if j != nil {
			defer func() { assert.NoError(t, j.Close(), "close rank %d", r) }()
		}
	}
	for r := range world {
		require.NoError(t, errs[r], "rank %d", r)
	}
	for r := range world {
		_, err := jobs[r].Store().Add(ctx, "joined", 1)
		require.NoError(t, err, "rank %d", r)
	}
	n, err := jobs[0].Store().Add(ctx, "joined", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(world), n)
}

// Every rank of a job dials rank 0's store at once: the store holds a handshake slot
// for each of them, so that a burst of connections whose handshakes are slow to come
// (a loaded rank 0, a slow network) waits for none and has none dropped to make room.
// Connections that have sent nothing yet stand for those: with the default 64 slots
// the newcomers evict them after the 100 ms grace; with a slot per rank they all stay.
func TestJobStoreHoldsAHandshakeSlotPerRank(t *testing.T) {
	leaktest.Check(t)
	world := 2 * rendezvous.DefaultMaxHandshakes
	port := freePort(t)
	joinAll(t, port, world, 0)
	silent := make([]net.Conn, world-2)
	for i := range silent {
		nc, err := net.Dial("tcp", jobOf(port, 0, world).Addr())
		require.NoError(t, err)
		defer nc.Close()
		silent[i] = nc
	}
	// A rank that dials after them is served once the server accepted them all (the
	// listener's queue is first in, first out).
	joinAll(t, port, world, 1)
	evicted := 0
	buf := make([]byte, 1)
	for _, nc := range silent {
		_ = nc.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := nc.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			evicted++
		}
	}
	assert.Zero(t, evicted, "connections dropped from their handshake slot")
}

// A restarted rank 0 finds the id its first incarnation published: it closes that
// generation without being counted in it, and every rank meets in the next one with
// the new id, never the earlier one.
func TestARestartedRankZeroMovesEveryoneToTheNextGeneration(t *testing.T) {
	leaktest.Check(t)
	const world = 3
	port := freePort(t)
	jobs, fakes := joinAll(t, port, world, 0, 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := jobs[0].Store()
	key := func(name string) string { return rendezvous.GenerationKey(defaultGroup, 0, name) }
	earlier := make([]byte, 128) // the id of rank 0's first incarnation
	copy(earlier, "an earlier id")
	_, _, err := store.CompareAndSet(ctx, key("uid"), nil, earlier)
	require.NoError(t, err)

	bs, errs := onRanks([]int{0, 1, 2}, func(r int) (*nccl.Backend, error) { return jobs[r].NewNCCL(ctx) })
	for r := range world {
		require.NoError(t, errs[r], "rank %d", r)
		assert.Equal(t, uint64(1), memberOf(bs[r]).generation(), "rank %d", r)
		assert.Equal(t, fakes[0].initIDs(), fakes[r].initIDs(), "rank %d", r)
		assert.NotEqual(t, earlier, fakes[r].initIDs()[0][:], "rank %d", r)
	}
	state, err := store.Get(ctx, key("state"))
	require.NoError(t, err)
	assert.Contains(t, string(state), "rank 0 found an id published by an earlier rank 0")
	present, err := store.Check(ctx, key("rank/0"))
	require.NoError(t, err)
	assert.Equal(t, []bool{false}, present, "rank 0 was not counted in the generation it closed")
	closeAll(t, bs)
}

// memberOf is b's place in its job.
func memberOf(b *nccl.Backend) *member { return ncclcfg.MemberOf(b).(*member) }

// p is a device pointer for operations on the fake driver.
const p comm.DevicePtr = 0x10000

// onRecord is a slog.Handler, at every level, that calls f with each record's message
// and attributes (as text).
type onRecord func(msg string, attrs map[string]string)

func (onRecord) Enabled(context.Context, slog.Level) bool { return true }
func (f onRecord) Handle(_ context.Context, r slog.Record) error {
	attrs := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	f(r.Message, attrs)
	return nil
}
func (f onRecord) WithAttrs([]slog.Attr) slog.Handler { return f }
func (f onRecord) WithGroup(string) slog.Handler      { return f }
