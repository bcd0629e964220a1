package commtest_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// Inside a Group, PutSignal is recorded and launched by Submit, and NCCL launches a
// communicator's one-sided calls of a group before its collectives: rank 0's group
// issues an all-reduce and then a put to rank 1, while rank 1 waits for the put's
// signal before it joins the all-reduce. In issue order the two would wait for each
// other for ever; as NCCL orders them, both complete and the put's bytes are there.
func TestGroupedPutSignalGoesBeforeTheGroupsCollectives(t *testing.T) {
	// The operation timeout is a hang guard: a deadlock fails with ErrTimeout.
	c, _, mem, inbox := oneSidedPair(t, commtest.WithCommOptions(nccl.WithTimeout(30*time.Second)))
	src := mem[0] + 4096
	require.NoError(t, c.Write(0, src, []byte("prefill!")))
	var sums [2]comm.DevicePtr
	for r := range 2 {
		var err error
		sums[r], err = c.Alloc(r, 8)
		require.NoError(t, err)
		require.NoError(t, c.WriteValues(r, sums[r], comm.BFloat16, []float64{float64(r + 1), 1, 2, 3}))
	}
	eachBackend(t, c, func(r int, b *nccl.Backend) error {
		if r == 0 {
			g := b.NewGroup()
			if err := g.Add(func() error {
				return errors.Join(b.AllReduce(sums[0], 8), b.PutSignal(src, 8, 1, inbox[0], 64, nccl.Signal{}, 0))
			}); err != nil {
				return err
			}
			return g.Submit()
		}
		if err := b.WaitSignal([]nccl.SignalWait{{Peer: 0, Count: 1}}, 0); err != nil {
			return err
		}
		return b.AllReduce(sums[1], 8)
	})
	got, err := c.Read(1, mem[1]+64, 8)
	require.NoError(t, err)
	assert.Equal(t, "prefill!", string(got), "the grouped put landed in rank 1's window")
	for r := range 2 {
		vals, err := c.ReadValues(r, sums[r], comm.BFloat16, 4)
		require.NoError(t, err)
		assert.Equal(t, []float64{3, 2, 4, 6}, vals, "rank %d's all-reduce", r)
	}
}

// GroupStart/GroupEnd and comm.InGroup take Signal and WaitSignal too: nothing is
// launched before the outermost GroupEnd, a grouped wait with two terms consumes what
// it waited for, and the flight recorder has the grouped calls as one coalesced group
// with a record per call and per wait term, as outside a group.
func TestGroupedSignalAndWaitCompleteAtTheOutermostGroupEnd(t *testing.T) {
	c, err := commtest.NewCluster(3, commtest.WithElementType(comm.Float32),
		commtest.WithCommOptions(nccl.WithFlightRecorder(64)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bs := make([]*nccl.Backend, 3)
	for r := range bs {
		bs[r], err = c.NCCL(r)
		require.NoError(t, err)
	}
	eachBackend(t, c, func(r int, b *nccl.Backend) error {
		_, err := b.SymmetricAlloc(4096) // the one-sided machinery needs the windows' state
		return err
	})

	// Rank 2 waits, in a group, for one signal from each of ranks 0 and 1.
	require.NoError(t, comm.InGroup(bs[2], func() error {
		return bs[2].WaitSignal([]nccl.SignalWait{{Peer: 0, Count: 1}, {Peer: 1, Count: 1}}, 0)
	}))
	// Ranks 0 and 1 signal inside nested levels: nothing goes before the outermost end.
	for r := range 2 {
		b := bs[r]
		require.NoError(t, b.Communicator().GroupStart())
		require.NoError(t, b.Communicator().GroupStart())
		require.NoError(t, b.Signal(2, nccl.Signal{}, 0))
		require.NoError(t, b.Communicator().GroupEnd())
		if r == 1 {
			done := make(chan error, 1)
			go func() { done <- bs[2].Communicator().Sync(ctx) }()
			select {
			case err := <-done:
				t.Fatalf("rank 2's wait went on with rank 1's signal still inside its group: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
			require.NoError(t, b.Communicator().GroupEnd())
			require.NoError(t, <-done)
			break
		}
		require.NoError(t, b.Communicator().GroupEnd())
	}

	// The wait consumed both signals: another one needs new ones.
	require.NoError(t, comm.InGroup(bs[2], func() error {
		return bs[2].WaitSignal([]nccl.SignalWait{{Peer: 1, Count: 1}}, 0)
	}))
	done := make(chan error, 1)
	go func() { done <- bs[2].Communicator().Sync(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("a grouped wait went through on consumed signals: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, bs[1].Signal(2, nccl.Signal{}, 0))
	require.NoError(t, <-done)

	var dump bytes.Buffer
	require.NoError(t, bs[2].FlightRecorder().Dump(&dump))
	tr, err := flightrec.ReadTrace(&dump)
	require.NoError(t, err)
	var waits []string
	for _, e := range tr.Entries {
		if strings.Contains(e.ProfilingName, "wait_signal") {
			waits = append(waits, e.ProfilingName)
		}
	}
	assert.Equal(t, []string{"nccl:wait_signal 2<-0", "nccl:wait_signal 2<-1", "nccl:wait_signal 2<-1"}, waits,
		"one record per wait term, grouped or not")
}
