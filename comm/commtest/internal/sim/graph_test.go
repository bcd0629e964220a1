package sim

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

func captureErr(t *testing.T, err error, want CUDAResult) {
	t.Helper()
	var ce *CUDAError
	require.True(t, errors.As(err, &ce), "got %v, want %v", err, want)
	require.Equal(t, want, ce.Code, "%v", err)
}

// Recorded work does not run at capture; each launch runs it again, and every launch
// of an all-reduce is a new collective that meets the other ranks' launch of the same
// index, on the input of that moment, in order with the communicator's other
// collectives.
func TestGraphReplaysACapturedAllReduce(t *testing.T) {
	for _, n := range []int{2, 4} {
		r := newRig(t, n)
		bufs := r.alloc(t, 4, func(rank int) []byte { return binary.LittleEndian.AppendUint32(nil, 1) })
		exec := make([]gpulib.Handle, n)
		for i := range n {
			require.NoError(t, r.w.BeginCapture(i, r.s[i]))
			require.NoError(t, r.d[i].AllReduce(bufs[i], bufs[i], 1, gpulib.Uint32, gpulib.Sum, r.c[i], r.s[i]))
			capturing, err := r.d[i].StreamIsCapturing(r.s[i])
			require.NoError(t, err)
			require.True(t, capturing)
			g, err := r.w.EndCapture(i, r.s[i])
			require.NoError(t, err)
			exec[i], err = r.w.Instantiate(i, g)
			require.NoError(t, err)
			require.NoError(t, r.w.DestroyGraph(i, g))
			capturing, err = r.d[i].StreamIsCapturing(r.s[i])
			require.NoError(t, err)
			require.False(t, capturing)
		}
		r.sync(t)
		for i := range n {
			assert.Equal(t, uint32(1), binary.LittleEndian.Uint32(r.read(t, i, bufs[i], 4)), "rank %d: captured work ran", i)
		}
		want := uint32(1)
		for k := range 100 {
			want *= uint32(n * n) // the replay, then an ordinary all-reduce behind it
			for i := range n {
				require.NoError(t, r.w.Launch(i, exec[i], r.s[i]))
				require.NoError(t, r.d[i].AllReduce(bufs[i], bufs[i], 1, gpulib.Uint32, gpulib.Sum, r.c[i], r.s[i]))
			}
			r.sync(t)
			for i := range n {
				require.Equal(t, want, binary.LittleEndian.Uint32(r.read(t, i, bufs[i], 4)), "rank %d launch %d", i, k)
			}
		}
	}
}

// A wait, a query, an allocation during capture fail with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture; an event recorded
// outside the capture cannot be waited for; EndCapture then fails.
func TestUnsafeCallsInvalidateTheCapture(t *testing.T) {
	unsafe := map[string]func(r *rig, ev gpulib.Event) error{
		"cuStreamSynchronize": func(r *rig, _ gpulib.Event) error { return r.d[0].StreamSynchronize(r.s[0]) },
		"cuStreamQuery":       func(r *rig, _ gpulib.Event) error { _, err := r.d[0].StreamQuery(r.s[0]); return err },
		"cuMemAlloc":          func(r *rig, _ gpulib.Event) error { _, err := r.d[0].MemAlloc(64); return err },
		"cuEventQuery": func(r *rig, ev gpulib.Event) error {
			if err := r.d[0].EventRecord(ev, r.s[0]); err != nil {
				return err
			}
			_, err := r.d[0].EventQuery(ev)
			return err
		},
	}
	for name, call := range unsafe {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, 1)
			ev, err := r.d[0].EventCreate()
			require.NoError(t, err)
			require.NoError(t, r.w.BeginCapture(0, r.s[0]))
			captureErr(t, call(r, ev), ErrorStreamCaptureUnsupported)
			_, err = r.w.EndCapture(0, r.s[0])
			captureErr(t, err, ErrorStreamCaptureInvalidated)
			_, err = r.d[0].StreamQuery(r.s[0]) // the capture has ended
			require.NoError(t, err)
		})
	}
	t.Run("ncclMemAlloc", func(t *testing.T) {
		r := newRig(t, 1)
		require.NoError(t, r.w.BeginCapture(0, r.s[0]))
		_, err := r.d[0].MemAllocNCCL(64)
		require.ErrorIs(t, err, gpulib.UnhandledCudaError)
		require.ErrorContains(t, err, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")
		_, err = r.w.EndCapture(0, r.s[0])
		captureErr(t, err, ErrorStreamCaptureInvalidated)
	})
	t.Run("outside event", func(t *testing.T) {
		r := newRig(t, 1)
		ev, err := r.d[0].EventCreate()
		require.NoError(t, err)
		other, err := r.d[0].StreamCreate()
		require.NoError(t, err)
		require.NoError(t, r.d[0].EventRecord(ev, other))
		require.NoError(t, r.w.BeginCapture(0, r.s[0]))
		captureErr(t, r.d[0].StreamWaitEvent(r.s[0], ev), ErrorStreamCaptureIsolation)
		_, err = r.w.EndCapture(0, r.s[0])
		captureErr(t, err, ErrorStreamCaptureInvalidated)
	})
	t.Run("misuse", func(t *testing.T) {
		r := newRig(t, 1)
		captureErr(t, r.w.BeginCapture(0, 0), ErrorStreamCaptureUnsupported)
		_, err := r.w.EndCapture(0, r.s[0])
		captureErr(t, err, ErrorIllegalState)
		require.NoError(t, r.w.BeginCapture(0, r.s[0]))
		captureErr(t, r.w.BeginCapture(0, r.s[0]), ErrorIllegalState)
		g, err := r.w.EndCapture(0, r.s[0])
		require.NoError(t, err)
		captureErr(t, r.w.Launch(0, g, r.s[0]), ErrorInvalidValue) // not instantiated
		require.NoError(t, r.w.DestroyGraph(0, g))
		captureErr(t, r.w.Launch(0, g, r.s[0]), ErrorInvalidHandle)
	})
}

// A stream that waits for an event recorded in the capture joins it (fork); ending
// the capture on the joined stream instead of the origin is refused.
func TestForkedStreamJoinsTheCapture(t *testing.T) {
	r := newRig(t, 1)
	d := r.d[0]
	side, err := d.StreamCreate()
	require.NoError(t, err)
	ev, err := d.EventCreate()
	require.NoError(t, err)
	src := r.alloc(t, 4, func(int) []byte { return []byte{1, 2, 3, 4} })[0]
	dst := r.alloc(t, 4, nil)[0]
	require.NoError(t, r.w.BeginCapture(0, r.s[0]))
	require.NoError(t, d.EventRecord(ev, r.s[0]))
	require.NoError(t, d.StreamWaitEvent(side, ev))
	capturing, err := d.StreamIsCapturing(side)
	require.NoError(t, err)
	require.True(t, capturing)
	require.NoError(t, d.MemcpyDtoDAsync(dst, src, 4, side))
	require.NoError(t, d.EventRecord(ev, side))
	require.NoError(t, d.StreamWaitEvent(r.s[0], ev))
	_, err = r.w.EndCapture(0, side)
	captureErr(t, err, ErrorStreamCaptureUnmatched)
	g, err := r.w.EndCapture(0, r.s[0])
	require.NoError(t, err)
	assert.Equal(t, []byte{0, 0, 0, 0}, r.read(t, 0, dst, 4))
	exec, err := r.w.Instantiate(0, g)
	require.NoError(t, err)
	require.NoError(t, r.w.Launch(0, exec, r.s[0]))
	require.NoError(t, d.StreamSynchronize(r.s[0]))
	assert.Equal(t, []byte{1, 2, 3, 4}, r.read(t, 0, dst, 4))
}

// One group may not mix capturing and non-capturing streams (NCCL refuses it).
func TestGroupAcrossCapturingAndOrdinaryStreamsIsRefused(t *testing.T) {
	r := newRig(t, 1)
	d := r.d[0]
	other, err := d.StreamCreate()
	require.NoError(t, err)
	buf := r.alloc(t, 8, nil)[0]
	require.NoError(t, r.w.BeginCapture(0, r.s[0]))
	require.NoError(t, d.GroupStart())
	require.NoError(t, d.Send(buf, 1, gpulib.Uint32, 0, r.c[0], r.s[0]))
	require.NoError(t, d.Recv(buf+4, 1, gpulib.Uint32, 0, r.c[0], other))
	require.ErrorIs(t, d.GroupEnd(), gpulib.InvalidUsage)
	_, err = r.w.EndCapture(0, r.s[0])
	require.NoError(t, err)
}

// A forked stream whose work the origin never waits for fails EndCapture with
// CUDA_ERROR_STREAM_CAPTURE_UNJOINED, and the capture ends.
func TestUnjoinedForkFailsEndCapture(t *testing.T) {
	r := newRig(t, 1)
	d := r.d[0]
	side, err := d.StreamCreate()
	require.NoError(t, err)
	ev, err := d.EventCreate()
	require.NoError(t, err)
	src := r.alloc(t, 4, nil)[0]
	dst := r.alloc(t, 4, nil)[0]
	require.NoError(t, r.w.BeginCapture(0, r.s[0]))
	require.NoError(t, d.EventRecord(ev, r.s[0]))
	require.NoError(t, d.StreamWaitEvent(side, ev))
	require.NoError(t, d.MemcpyDtoDAsync(dst, src, 4, side))
	require.NoError(t, d.EventRecord(ev, side))
	require.NoError(t, d.MemcpyDtoDAsync(src, dst, 4, side)) // after the event: not joined
	require.NoError(t, d.StreamWaitEvent(r.s[0], ev))
	_, err = r.w.EndCapture(0, r.s[0])
	captureErr(t, err, ErrorStreamCaptureUnjoined)
	for _, s := range []gpulib.Stream{r.s[0], side} {
		capturing, err := d.StreamIsCapturing(s)
		require.NoError(t, err)
		require.False(t, capturing)
	}
}
