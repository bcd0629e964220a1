package sim

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// ncclGroupSimulateEnd ends the group without launching it: the buffer is unchanged
// after the stream drains, the peer is not waited for, and the next all-reduce of both
// ranks still pairs up (no sequence number was taken). Inner levels only count; the
// outermost one estimates, longer for more bytes. A group of sends and receives only
// has no estimate.
func TestGroupSimulateEndLaunchesNothingAndEstimates(t *testing.T) {
	r := newRig(t, 2)
	p := r.alloc(t, 1<<20, func(rank int) []byte { b := make([]byte, 1<<20); b[0] = byte(rank + 1); return b })
	d, c, s := r.d[0], r.c[0], r.s[0]
	estimate := func(count uint64, nested bool) float32 {
		var est float32
		within(t, 10*time.Second, func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			require.NoError(t, d.GroupStart())
			if nested {
				require.NoError(t, d.GroupStart())
			}
			require.NoError(t, d.AllReduce(p[0], p[0], count, gpulib.Uint8, gpulib.Sum, c, s))
			if nested {
				inner, err := d.GroupSimulateEnd()
				require.NoError(t, err)
				assert.Negative(t, inner, "an inner level estimates nothing")
			}
			var err error
			est, err = d.GroupSimulateEnd()
			require.NoError(t, err)
		})
		return est
	}
	small, large := estimate(8, false), estimate(1<<20, true)
	assert.Positive(t, small)
	assert.Greater(t, large, small)
	require.NoError(t, d.StreamSynchronize(s))
	assert.Equal(t, byte(1), r.read(t, 0, p[0], 1)[0], "nothing was launched")

	r.each(t, func(i int) error { return r.d[i].AllReduce(p[i], p[i], 8, gpulib.Uint8, gpulib.Sum, r.c[i], r.s[i]) })
	r.sync(t)
	for i := range 2 {
		assert.Equal(t, byte(3), r.read(t, i, p[i], 1)[0], "rank %d: the next all-reduce pairs up", i)
	}

	within(t, 10*time.Second, func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		require.NoError(t, d.GroupStart())
		require.NoError(t, d.Send(p[0], 8, gpulib.Uint8, 1, c, s))
		est, err := d.GroupSimulateEnd()
		require.NoError(t, err)
		assert.Negative(t, est, "point-to-point operations are not estimated")
	})
}

// ncclGroupSimulateEnd appeared in NCCL 2.22.3.
func TestGroupSimulateEndNeedsItsVersion(t *testing.T) {
	r := newRig(t, 1, WithVersion(21803))
	_, err := r.d[0].GroupSimulateEnd()
	var m *MissingSymbolError
	require.ErrorAs(t, err, &m)
	assert.Equal(t, versionGroupSimulate, m.Since)

	r = newRig(t, 1, WithVersion(22203))
	_, err = r.d[0].GroupSimulateEnd()
	assert.Equal(t, gpulib.InvalidUsage, ncclCode(err), "2.22.3 has it: outside a group it is NCCL's misuse")
}
