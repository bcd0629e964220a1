package job

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/leaktest"
	"github.com/ncclgo/ncclgo/comm/internal/nettest"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// serveStore runs an ncclgo store (which also answers torch's protocol, as torchrun's
// agent store would) on a loopback port.
func serveStore(t *testing.T) (*rendezvous.Server, int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := rendezvous.NewServer(rendezvous.WithLogger(quietLog))
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(context.Background(), l) }()
	t.Cleanup(func() { _ = s.Close(); <-done })
	return s, l.Addr().(*net.TCPAddr).Port
}

// agentEnv sets what torchrun's agent gives a worker of restart `restart`.
func agentEnv(t *testing.T, port, rank, world, restart int) {
	t.Setenv(EnvUseAgentStore, "True")
	t.Setenv(EnvRestartCount, strconv.Itoa(restart))
	t.Setenv(rendezvous.EnvMasterAddr, "127.0.0.1")
	t.Setenv(rendezvous.EnvMasterPort, strconv.Itoa(port))
	t.Setenv(rendezvous.EnvRank, strconv.Itoa(rank))
	t.Setenv(rendezvous.EnvLocalRank, strconv.Itoa(rank))
	t.Setenv(rendezvous.EnvWorldSize, strconv.Itoa(world))
	t.Setenv(EnvStorePort, "")
}

// Under TORCHELASTIC_USE_AGENT_STORE=True the ranks are TCPStore clients of the agent's
// store, rank 0 serves nothing, and the unique id, the generation's barrier and its
// state go through the agent's store under the restart's prefix.
func TestAgentStoreCarriesTheRendezvous(t *testing.T) {
	leaktest.Check(t)
	_, port := serveStore(t)
	const world = 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs, fakes := map[int]*Job{}, map[int]idFake{}
	for r := range world {
		agentEnv(t, port, r, world, 1)
		f := newIDFake()
		j, err := JoinJob(ctx, withDevice(f), quiet)
		require.NoError(t, err, "rank %d", r)
		t.Cleanup(func() { _ = j.Close() })
		require.Nil(t, j.server, "rank %d serves a store of its own", r)
		_, isTCPStore := j.Store().(*rendezvous.TCPStoreClient)
		require.True(t, isTCPStore, "rank %d store is %T", r, j.Store())
		jobs[r], fakes[r] = j, f
	}
	bs, errs := onRanks([]int{0, 1, 2}, func(r int) (*nccl.Backend, error) { return jobs[r].NewNCCL(ctx) })
	for r := range world {
		require.NoError(t, errs[r], "rank %d", r)
	}
	defer closeAll(t, bs)
	want := fakes[0].initIDs()
	require.Len(t, want, 1)
	for r := range world {
		assert.Equal(t, want, fakes[r].initIDs(), "rank %d got rank 0's unique id", r)
	}
	_, errs = onRanks([]int{0, 1, 2}, func(r int) (struct{}, error) {
		return struct{}{}, jobs[r].Store().Barrier(ctx, "test/barrier", r, world)
	})
	for r := range world {
		require.NoError(t, errs[r], "barrier, rank %d", r)
	}
	// The keys are the agent's worker keys of restart 1, as ncclgo's own clients see
	// them ("/" stripped).
	c, err := rendezvous.Dial(ctx, "127.0.0.1:"+strconv.Itoa(port), rendezvous.WithLogger(quietLog))
	require.NoError(t, err)
	defer c.Close()
	v, err := c.Get(ctx, "/worker/attempt_1/"+rendezvous.GenerationKey(defaultGroup, 0, "state"))
	require.NoError(t, err)
	assert.Equal(t, stateOK, string(v))
}

// A restart of the workers (TORCHELASTIC_RESTART_COUNT 1) meets under new keys even
// though the first attempt left a half-finished generation 0 behind.
func TestAgentStoreRestartMeetsInTheNewAttempt(t *testing.T) {
	leaktest.Check(t)
	_, port := serveStore(t)
	const world = 2
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Attempt 0: rank 0 arrived and its peer died.
	agentEnv(t, port, 0, world, 0)
	j0, err := JoinJob(ctx, withDevice(newIDFake()), quiet)
	require.NoError(t, err)
	// The deadline passes once rank 0 has arrived, however slow the machine.
	short, expire := nettest.ExpiringContext()
	defer expire()
	failed := make(chan error, 1)
	go func() { _, err := j0.NewNCCL(short); failed <- err }()
	probe, err := rendezvous.Dial(ctx, "127.0.0.1:"+strconv.Itoa(port), rendezvous.WithLogger(quietLog))
	require.NoError(t, err)
	defer probe.Close()
	waitCount(t, probe, rendezvous.AgentStorePrefix(0)+"/"+rendezvous.GenerationKey(defaultGroup, 0, "count"), 1)
	expire()
	err = <-failed
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var be *rendezvous.BarrierError
	require.True(t, errors.As(err, &be), "attempt 0 without its peer: %v", err)
	assert.Equal(t, []int{1}, be.Missing)
	require.NoError(t, j0.Close())

	jobs, fakes := map[int]*Job{}, map[int]idFake{}
	for r := range world {
		agentEnv(t, port, r, world, 1)
		f := newIDFake()
		j, err := JoinJob(ctx, withDevice(f), quiet)
		require.NoError(t, err)
		t.Cleanup(func() { _ = j.Close() })
		jobs[r], fakes[r] = j, f
	}
	bs, errs := onRanks([]int{0, 1}, func(r int) (*nccl.Backend, error) { return jobs[r].NewNCCL(ctx) })
	for r := range world {
		require.NoError(t, errs[r], "rank %d", r)
	}
	defer closeAll(t, bs)
	for r := range world {
		assert.Equal(t, uint64(0), memberOf(bs[r]).generation(), "rank %d starts afresh in the new attempt", r)
		assert.Equal(t, fakes[0].initIDs(), fakes[r].initIDs(), "rank %d", r)
	}
}

func TestAgentStoreBadRestartCount(t *testing.T) {
	agentEnv(t, 29500, 0, 1, 0)
	t.Setenv(EnvRestartCount, "x")
	_, err := JoinJob(context.Background(), withDevice(newIDFake()), quiet)
	var ce *rendezvous.ConfigError
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, EnvRestartCount, ce.Var)
}

// turnProxy forwards connections to a server and counts the round trips its clients
// start: a client's bytes that come after the server's answer (or first) begin one.
type turnProxy struct {
	port  int
	turns atomic.Int64
}

// startTurnProxy forwards a loopback port of its own to the server on port.
func startTurnProxy(t *testing.T, port int) *turnProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &turnProxy{port: l.Addr().(*net.TCPAddr).Port}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				_ = in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			var answered atomic.Bool
			answered.Store(true)
			pipe := func(dst, src net.Conn, fromClient bool) {
				defer dst.Close()
				defer src.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 {
						if fromClient && answered.Swap(false) {
							p.turns.Add(1)
						} else if !fromClient {
							answered.Store(true)
						}
						if _, err := dst.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}
			wg.Go(func() { pipe(out, in, true) })
			wg.Go(func() { pipe(in, out, false) })
		}
	})
	return p
}

// On ncclgo's server a rank joins over torch's TCPStore protocol as it does over
// ncclgo's own: its arrival is one request, one round trip, instead of the calls one
// after the other that torch's own server needs.
func TestAgentStoreJoinIsOneRoundTripOnNcclgosServer(t *testing.T) {
	leaktest.Check(t)
	_, port := serveStore(t)
	p := startTurnProxy(t, port)
	const world = 4
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs := map[int]*Job{}
	for r := range world {
		agentEnv(t, p.port, r, world, 0)
		j, err := JoinJob(ctx, withDevice(newIDFake()), quiet)
		require.NoError(t, err, "rank %d", r)
		t.Cleanup(func() { _ = j.Close() })
		jobs[r] = j
	}
	before := p.turns.Load()
	bs, errs := onRanks([]int{0, 1, 2, 3}, func(r int) (*nccl.Backend, error) { return jobs[r].NewNCCL(ctx) })
	for r := range world {
		require.NoError(t, errs[r], "rank %d", r)
	}
	defer closeAll(t, bs)
	assert.Equal(t, int64(world), p.turns.Load()-before, "round trips of %d ranks' join", world)
}
