package sim

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

func TestGroupedRingExchange(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8} {
		t.Run(fmt.Sprint("world", n), func(t *testing.T) {
			r := newRig(t, n)
			send := r.alloc(t, 12, func(i int) []byte { return int32s([]int32{int32(i), int32(10 * i), -1}) })
			recv := r.alloc(t, 12, nil)
			r.each(t, func(i int) error {
				runtime.LockOSThread() // NCCL's group state is per thread
				defer runtime.UnlockOSThread()
				d := r.d[i]
				if err := d.GroupStart(); err != nil {
					return err
				}
				if err := d.Send(send[i], 3, gpulib.Int32, (i+1)%n, r.c[i], r.s[i]); err != nil {
					return err
				}
				if err := d.Recv(recv[i], 3, gpulib.Int32, (i+n-1)%n, r.c[i], r.s[i]); err != nil {
					return err
				}
				return d.GroupEnd()
			})
			r.sync(t)
			for i := range n {
				from := (i + n - 1) % n
				assert.Equal(t, int32s([]int32{int32(from), int32(10 * from), -1}), r.read(t, i, recv[i], 12), "rank %d", i)
			}
		})
	}
}

func TestUngroupedExchangeDeadlocksLikeNCCL(t *testing.T) {
	r := newRig(t, 2)
	bufs := r.alloc(t, 8, nil)
	// Both ranks send first, then receive, on one stream each, without a group: each send
	// waits for a receive that is queued behind it.
	r.each(t, func(i int) error {
		if err := r.d[i].Send(bufs[i], 1, gpulib.Int32, 1-i, r.c[i], r.s[i]); err != nil {
			return err
		}
		return r.d[i].Recv(bufs[i]+4, 1, gpulib.Int32, 1-i, r.c[i], r.s[i])
	})
	assert.True(t, never(50*time.Millisecond, func() bool {
		done, _ := r.d[0].StreamQuery(r.s[0])
		return done
	}), "the exchange must not complete")
	r.each(t, func(i int) error { return r.d[i].CommAbort(r.c[i]) })
	r.sync(t) // abort ends the pending operations
}

func TestSendRecvSizeMismatchIsInvalidUsage(t *testing.T) {
	r := newRig(t, 2)
	bufs := r.alloc(t, 16, nil)
	require.NoError(t, r.d[0].Send(bufs[0], 4, gpulib.Int32, 1, r.c[0], r.s[0]))
	require.NoError(t, r.d[1].Recv(bufs[1], 3, gpulib.Int32, 0, r.c[1], r.s[1]))
	r.sync(t)
	for i := range 2 {
		res, err := r.d[i].CommGetAsyncError(r.c[i])
		require.NoError(t, err)
		assert.Equal(t, gpulib.InvalidUsage, res)
	}
}

func TestSendRecvMatchInOrderPerPeer(t *testing.T) {
	r := newRig(t, 2)
	src := r.alloc(t, 8, func(i int) []byte { return int32s([]int32{1, 2}) })
	dst := r.alloc(t, 8, nil)
	require.NoError(t, r.d[0].Send(src[0], 1, gpulib.Int32, 1, r.c[0], r.s[0]))
	require.NoError(t, r.d[0].Send(src[0]+4, 1, gpulib.Int32, 1, r.c[0], r.s[0]))
	require.NoError(t, r.d[1].Recv(dst[1], 1, gpulib.Int32, 0, r.c[1], r.s[1]))
	require.NoError(t, r.d[1].Recv(dst[1]+4, 1, gpulib.Int32, 0, r.c[1], r.s[1]))
	r.sync(t)
	assert.Equal(t, int32s([]int32{1, 2}), r.read(t, 1, dst[1], 8))
}

func TestUnmatchedSendNeverCompletes(t *testing.T) {
	r := newRig(t, 2)
	bufs := r.alloc(t, 4, nil)
	require.NoError(t, r.d[0].Send(bufs[0], 1, gpulib.Int32, 1, r.c[0], r.s[0]))
	assert.True(t, never(30*time.Millisecond, func() bool {
		done, _ := r.d[0].StreamQuery(r.s[0])
		return done
	}))
}

func TestGroupNestingAndMisuse(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := newRig(t, 2)
	d := r.d[0]
	assert.Equal(t, gpulib.InvalidUsage, ncclCode(d.GroupEnd()), "GroupEnd without GroupStart")

	require.NoError(t, d.GroupStart())
	require.NoError(t, d.GroupStart())
	require.NoError(t, d.GroupEnd())
	_, err := d.CommSplit(r.c[0], 0, 0, gpulib.Config{Blocking: true})
	assert.Equal(t, gpulib.InvalidUsage, ncclCode(err), "split inside a group")
	id, _ := d.GetUniqueID()
	_, err = d.CommInitRank(1, id, 0, gpulib.Config{Blocking: true})
	assert.Equal(t, gpulib.InvalidUsage, ncclCode(err), "init inside a group")
	require.NoError(t, d.GroupEnd())
	assert.Equal(t, gpulib.InvalidUsage, ncclCode(d.GroupEnd()), "one end too many")
}

func TestAnErrorInsideAGroupDropsTheWholeGroup(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := newRig(t, 2)
	bufs := r.alloc(t, 4, func(i int) []byte { return int32s([]int32{5}) })
	d := r.d[0]
	require.NoError(t, d.GroupStart())
	require.NoError(t, d.AllReduce(bufs[0], bufs[0], 1, gpulib.Int32, gpulib.Sum, r.c[0], r.s[0]))
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(d.Broadcast(bufs[0], bufs[0], 1, gpulib.Int32, 7, r.c[0], r.s[0])))
	err := d.GroupEnd()
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(err))
	// Nothing was launched: a fresh all-reduce on both ranks is the first one.
	r.each(t, func(i int) error {
		return r.d[i].AllReduce(bufs[i], bufs[i], 1, gpulib.Int32, gpulib.Sum, r.c[i], r.s[i])
	})
	r.sync(t)
	assert.Equal(t, int32s([]int32{10}), r.read(t, 1, bufs[1], 4))
}

// TestGroupScopeIsPerThread checks NCCL's group scope: a group opened on one thread
// defers the calls that thread makes on any communicator, of any device, to its
// outermost ncclGroupEnd; a call from another thread is not part of it.
func TestGroupScopeIsPerThread(t *testing.T) {
	r := newRig(t, 2)
	bufs := r.alloc(t, 4, func(i int) []byte { return int32s([]int32{int32(i + 1)}) })
	opened, submitted, release := make(chan struct{}), make(chan error), make(chan struct{})
	ended := make(chan error)
	go func() { // one thread drives both ranks inside one group opened on device 0
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := r.d[0].GroupStart(); err != nil {
			ended <- err
			return
		}
		close(opened)
		err0 := r.d[0].AllReduce(bufs[0], bufs[0], 1, gpulib.Int32, gpulib.Sum, r.c[0], r.s[0])
		err1 := r.d[1].AllReduce(bufs[1], bufs[1], 1, gpulib.Int32, gpulib.Sum, r.c[1], r.s[1])
		submitted <- errors.Join(err0, err1)
		<-release
		ended <- r.d[0].GroupEnd()
	}()
	<-opened
	require.NoError(t, <-submitted)
	for i := range 2 { // nothing launched yet: the group is open
		done, err := r.d[i].StreamQuery(r.s[i])
		require.NoError(t, err)
		assert.True(t, done, "rank %d: a grouped call reached its stream before ncclGroupEnd", i)
		assert.Equal(t, int32s([]int32{int32(i + 1)}), r.read(t, i, bufs[i], 4), "rank %d", i)
	}
	// This goroutine's thread has no group: ncclGroupEnd here is a misuse.
	runtime.LockOSThread()
	assert.Equal(t, gpulib.InvalidUsage, ncclCode(r.d[1].GroupEnd()), "another thread's group")
	runtime.UnlockOSThread()
	close(release)
	require.NoError(t, <-ended)
	r.sync(t)
	for i := range 2 {
		assert.Equal(t, int32s([]int32{3}), r.read(t, i, bufs[i], 4), "rank %d after the outermost ncclGroupEnd", i)
	}
}
