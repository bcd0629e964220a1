package sim

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// Buffers that overlap where NCCL's kernels would read what they have already written
// corrupt data on a GPU; the simulator, which would compute them exactly, reports them
// instead (ncclInvalidArgument naming the overlap), for calls that reach it without
// comm's validation. NCCL's in-place positions stay valid.
func TestOverlappingBuffersAreReportedNotComputed(t *testing.T) {
	r := newRig(t, 2)
	bufs := r.alloc(t, 64, nil)
	p := bufs[0]
	i8 := gpulib.Int8
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"all-gather send = recv+1 on rank 0", func() error { return r.d[0].AllGather(p+1, p, 4, i8, r.c[0], r.s[0]) }},
		{"all-gather send = recv+4 on rank 0", func() error { return r.d[0].AllGather(p+4, p, 4, i8, r.c[0], r.s[0]) }},
		{"reduce-scatter recv = send+2", func() error { return r.d[0].ReduceScatter(p, p+2, 4, i8, gpulib.Sum, r.c[0], r.s[0]) }},
		{"all-reduce partly in place", func() error { return r.d[0].AllReduce(p, p+1, 4, i8, gpulib.Sum, r.c[0], r.s[0]) }},
		{"all-to-all in place", func() error { return r.d[0].AlltoAll(p, p, 4, i8, r.c[0], r.s[0]) }},
		{"gather on root: send = recv+1", func() error { return r.d[0].Gather(p+1, p, 4, i8, 0, r.c[0], r.s[0]) }},
		{"receives from two peers into overlapping buffers in one group", func() error {
			runtime.LockOSThread() // NCCL's group state is per thread
			defer runtime.UnlockOSThread()
			require.NoError(t, r.d[0].GroupStart())
			require.NoError(t, r.d[0].Recv(p, 4, i8, 1, r.c[0], r.s[0]))
			require.NoError(t, r.d[0].Recv(p+2, 4, i8, 0, r.c[0], r.s[0]))
			return r.d[0].GroupEnd()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			assert.Equal(t, gpulib.InvalidArgument, ncclCode(err), "%v", err)
			assert.ErrorContains(t, err, "overlap")
		})
	}
	// Nothing was queued: the communicator still works, in place included.
	r.each(t, func(i int) error { return r.d[i].AllGather(bufs[i]+gpulib.Ptr(4*i), bufs[i], 4, i8, r.c[i], r.s[i]) })
	r.each(t, func(i int) error {
		return r.d[i].ReduceScatter(bufs[i], bufs[i]+gpulib.Ptr(4*i), 4, i8, gpulib.Sum, r.c[i], r.s[i])
	})
	r.each(t, func(i int) error {
		runtime.LockOSThread() // NCCL's group state is per thread
		defer runtime.UnlockOSThread()
		if err := r.d[i].GroupStart(); err != nil {
			return err
		}
		if err := r.d[i].Send(bufs[i], 4, i8, 1-i, r.c[i], r.s[i]); err != nil {
			return err
		}
		if err := r.d[i].Recv(bufs[i]+32, 4, i8, 1-i, r.c[i], r.s[i]); err != nil {
			return err
		}
		return r.d[i].GroupEnd()
	})
	// What real programs do and NCCL runs: receives from one peer into one buffer
	// (aggregated iterations) and a receive into the buffer a send reads (in-place
	// sendrecv).
	r.each(t, func(i int) error {
		runtime.LockOSThread() // NCCL's group state is per thread
		defer runtime.UnlockOSThread()
		if err := r.d[i].GroupStart(); err != nil {
			return err
		}
		for range 2 {
			if err := r.d[i].Send(bufs[i], 4, i8, 1-i, r.c[i], r.s[i]); err != nil {
				return err
			}
			if err := r.d[i].Recv(bufs[i], 4, i8, 1-i, r.c[i], r.s[i]); err != nil {
				return err
			}
		}
		return r.d[i].GroupEnd()
	})
	r.sync(t)
}
