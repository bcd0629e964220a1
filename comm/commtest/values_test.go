package commtest_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
)

// TestValueEncodingRoundTripsAndAgreesWithTheSliceForm checks the one-element encoders
// against the slice encoders for every type, and that bad input is an error.
func TestValueEncodingRoundTripsAndAgreesWithTheSliceForm(t *testing.T) {
	types := []comm.DType{comm.Int8, comm.Uint8, comm.Int32, comm.Uint32, comm.Int64, comm.Uint64,
		comm.Float16, comm.BFloat16, comm.Float32, comm.Float64, comm.Float8E4M3, comm.Float8E5M2}
	for _, dt := range types {
		for _, v := range []float64{0, 1, 3, -2, 12} { // exact in every type, fp8 included
			if v < 0 && (dt == comm.Uint8 || dt == comm.Uint32 || dt == comm.Uint64) {
				continue
			}
			want, err := commtest.EncodeValues(dt, []float64{v})
			require.NoError(t, err)
			got := make([]byte, dt.Size())
			require.NoError(t, commtest.EncodeValue(dt, got, v), dt)
			assert.Equal(t, want, got, "%v %v", dt, v)
			back, err := commtest.DecodeValue(dt, got)
			require.NoError(t, err)
			assert.Equal(t, v, back, "%v %v", dt, v)
		}
	}
	require.ErrorIs(t, commtest.EncodeValue(comm.Float32, make([]byte, 3), 1), comm.ErrInvalidSize)
	require.ErrorIs(t, commtest.EncodeValue(comm.DType(99), make([]byte, 8), 1), comm.ErrInvalidType)
	v, err := commtest.DecodeValue(comm.Int64, make([]byte, 7))
	require.ErrorIs(t, err, comm.ErrInvalidSize)
	assert.True(t, math.IsNaN(v))
}
