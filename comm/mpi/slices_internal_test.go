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
