package mpi

import (
	"testing"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSliceLengthMismatchIsAnError checks that a slice whose length does not fit the
// call fails with ErrInvalidSize naming both lengths, before any MPI call (the
// communicator has no MPI: a call reaching it would crash).
func TestSliceLengthMismatchIsAnError(t *testing.T) {
	c := &Communicator{rank: 1, world: 4}
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"all-reduce into, short recv", func() error { return AllReduceInto(c, make([]int32, 8), make([]int32, 7), comm.Sum) }, "has 7 elements, want 8"},
		{"all-gather, short recv", func() error { return AllGather(c, make([]float64, 3), make([]float64, 11)) }, "has 11 elements, want 12 (len(send) × 4 ranks)"},
		{"all-gather, long recv", func() error { return AllGather(c, make([]uint8, 3), make([]uint8, 13)) }, "has 13 elements, want 12"},
		{"reduce-scatter, short send", func() error { return ReduceScatter(c, make([]float32, 7), make([]float32, 2), comm.Sum) }, "has 7 elements, want 8 (len(recv) × 4 ranks)"},
		{"reduce, short recv on the root", func() error { return Reduce(c, make([]int32, 3), make([]int32, 2), comm.Sum, 1) }, "has 2 elements, want 3 (len(send), on the root)"},
		{"gather, short recv on the root", func() error { return Gather(c, make([]BFloat16, 2), make([]BFloat16, 7), 1) }, "has 7 elements, want 8 (len(send) × 4 ranks, on the root)"},
		{"scatter, long send on the root", func() error { return Scatter(c, make([]Float16, 9), make([]Float16, 2), 1) }, "has 9 elements, want 8 (len(recv) × 4 ranks, on the root)"},
		{"all-to-all, send not a multiple", func() error { return AllToAll(c, make([]float64, 6), make([]float64, 6)) }, "has 6 elements, want 4 (a multiple of 4 ranks)"},
		{"all-to-all, short recv", func() error { return AllToAll(c, make([]float64, 8), make([]float64, 7)) }, "has 7 elements, want 8 (len(send))"},
		{"all-to-allv, block past send", func() error {
			return AllToAllv(c, make([]Float8E4M3, 4), []int{1, 1, 1, 2}, []int{0, 1, 2, 3}, make([]Float8E4M3, 4), []int{1, 1, 1, 1}, []int{0, 1, 2, 3})
		}, "has 4 elements, want 5 (displacement[3] + count[3])"},
		{"broadcast into, short send on the root", func() error { return BroadcastInto(c, make([]Float8E5M2, 1), make([]Float8E5M2, 2), 1) }, "has 1 elements, want 2 (len(recv), on the root)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var ae *comm.ArgError
			require.ErrorAs(t, err, &ae)
			assert.ErrorIs(t, err, comm.ErrInvalidSize)
			assert.Contains(t, err.Error(), tc.want)
			assert.Zero(t, c.calls, "no mpi call")
		})
	}
}

type gradient float32

// TestSliceElementTypes checks the element type each Go type maps to, defined types
// included.
func TestSliceElementTypes(t *testing.T) {
	assert.Equal(t, comm.Int8, dtypeOf[int8]())
	assert.Equal(t, comm.Uint8, dtypeOf[uint8]())
	assert.Equal(t, comm.Int32, dtypeOf[int32]())
	assert.Equal(t, comm.Uint32, dtypeOf[uint32]())
	assert.Equal(t, comm.Int64, dtypeOf[int64]())
	assert.Equal(t, comm.Uint64, dtypeOf[uint64]())
	assert.Equal(t, comm.Float32, dtypeOf[float32]())
	assert.Equal(t, comm.Float64, dtypeOf[float64]())
	assert.Equal(t, comm.Float32, dtypeOf[gradient]())
}

// TestSliceNarrowElementTypes checks that the four storage types are their formats, not
// the integers they are defined on, and their conversions.
func TestSliceNarrowElementTypes(t *testing.T) {
	type myFloat float32
	assert.Equal(t, comm.BFloat16, dtypeOf[BFloat16]())
	assert.Equal(t, comm.Float16, dtypeOf[Float16]())
	assert.Equal(t, comm.Float8E4M3, dtypeOf[Float8E4M3]())
	assert.Equal(t, comm.Float8E5M2, dtypeOf[Float8E5M2]())
	assert.Equal(t, comm.Uint8, dtypeOf[uint8]())
	assert.Equal(t, comm.Float32, dtypeOf[myFloat]())
	assert.Equal(t, float32(1.5), NewBFloat16(1.5).Float32())
	assert.Equal(t, float32(-0.375), NewFloat16(-0.375).Float32())
	assert.Equal(t, float32(448), NewFloat8E4M3(1e6).Float32(), "E4M3 saturates")
	assert.Equal(t, float32(0.5), NewFloat8E5M2(0.5).Float32())
}
