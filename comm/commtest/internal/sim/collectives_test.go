package sim

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// ncclAlltoAll, ncclGather and ncclScatter exist from NCCL 2.28.3 only; ncclReduce and
// PreMulSum operators in every supported version.
func TestAlltoAllGatherScatterNeedNCCL2283(t *testing.T) {
	r := newRig(t, 1, WithVersion(22802))
	d, c, s := r.d[0], r.c[0], r.s[0]
	p := r.alloc(t, 16, nil)[0]
	var missing *MissingSymbolError
	for name, err := range map[string]error{
		"ncclAlltoAll": d.AlltoAll(p, p+8, 1, gpulib.Int32, c, s),
		"ncclGather":   d.Gather(p, p+8, 1, gpulib.Int32, 0, c, s),
		"ncclScatter":  d.Scatter(p, p+8, 1, gpulib.Int32, 0, c, s),
	} {
		require.True(t, errors.As(err, &missing), "%s: %v", name, err)
		assert.Equal(t, 22803, missing.Since, name)
	}
	assert.NoError(t, d.Reduce(p, p, 1, gpulib.Int32, gpulib.Sum, 0, c, s))
	op, err := d.RedOpCreatePreMulSum(c, gpulib.Int32, 3, false)
	require.NoError(t, err)
	assert.Equal(t, gpulib.NumOps, op, "NCCL numbers user operators from ncclNumOps")
}

// Rooted collectives whose ranks disagree on the root, and PreMulSum operators used
// with another data type or after ncclRedOpDestroy, fail as NCCL's do.
func TestRootedAndPreMulSumMisuse(t *testing.T) {
	r := newRig(t, 2)
	bufs := r.alloc(t, 16, nil)
	r.each(t, func(i int) error {
		return r.d[i].Gather(bufs[i], bufs[i]+8, 1, gpulib.Int32, i, r.c[i], r.s[i])
	})
	r.sync(t)
	res, err := r.d[1].CommGetAsyncError(r.c[1])
	require.NoError(t, err)
	assert.Equal(t, gpulib.InvalidUsage, res, "gather roots differ")

	q := newRig(t, 1)
	d, c, s := q.d[0], q.c[0], q.s[0]
	p := q.alloc(t, 16, nil)[0]
	op, err := d.RedOpCreatePreMulSum(c, gpulib.Float32, 0x40000000, false)
	require.NoError(t, err)
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(d.AllReduce(p, p, 1, gpulib.Float64, op, c, s)), "operator of another type")
	require.NoError(t, d.RedOpDestroy(c, op))
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(d.AllReduce(p, p, 1, gpulib.Float32, op, c, s)), "destroyed operator")
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(d.RedOpDestroy(c, op)), "destroyed twice")
	_, err = d.RedOpCreatePreMulSum(c, gpulib.Float32, 0, true)
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(err), "null device scalar")
}

// An operator destroyed right after the collective that uses it was enqueued still
// applies to that collective (NCCL resolves it at enqueue), and a device scalar is read
// when the collective runs.
func TestPreMulSumIsResolvedAtEnqueueAndReadsADeviceScalarWhenItRuns(t *testing.T) {
	r := newRig(t, 2)
	bufs := r.alloc(t, 4, func(i int) []byte { return int32s([]int32{int32(i + 1)}) })
	scalars := r.alloc(t, 4, func(i int) []byte { return int32s([]int32{10}) })
	fn, release := gate(t, r.w, 0)
	require.NoError(t, r.d[0].LaunchKernel(fn, 1, 1, r.s[0], gpulib.KernelArgs{}))
	r.each(t, func(i int) error {
		op, err := r.d[i].RedOpCreatePreMulSum(r.c[i], gpulib.Int32, uint64(scalars[i]), true)
		if err != nil {
			return err
		}
		if err := r.d[i].AllReduce(bufs[i], bufs[i], 1, gpulib.Int32, op, r.c[i], r.s[i]); err != nil {
			return err
		}
		return r.d[i].RedOpDestroy(r.c[i], op)
	})
	require.NoError(t, r.w.Write(0, scalars[0], int32s([]int32{100}))) // before rank 0's collective runs
	release()
	r.sync(t)
	assert.Equal(t, int32s([]int32{100*1 + 10*2}), r.read(t, 1, bufs[1], 4))
}
