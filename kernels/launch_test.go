package kernels

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLaunchDimsCoversEveryVectorUpToTheOccupancyLimit(t *testing.T) {
	const sms = 132 // H100/H200 SXM
	tests := []struct {
		name      string
		n, elem   int
		wantGrid  uint32
		rationale string
	}{
		{"empty", 0, 2, 1, "still launchable"},
		{"one element", 1, 2, 1, "one partial vector"},
		{"one block of bf16", 256 * 8, 2, 1, "2048 bf16 = 256 vectors = one block"},
		{"one more bf16", 256*8 + 1, 2, 2, "a 257th vector needs a second block"},
		{"fp32 vectors", 256 * 4 * 10, 4, 10, "4 fp32 per vector, 10 blocks"},
		{"capped", 1 << 30, 2, sms * BlocksPerSM, "1 GiB of bf16 is far beyond one pass: grid-stride"},
		{"just at the cap", sms * BlocksPerSM * BlockSize * 8, 2, sms * BlocksPerSM, "exactly one vector per thread"},
		{"huge count", math.MaxInt, 1, sms * BlocksPerSM, "no overflow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			grid, block, err := LaunchDims(tt.n, tt.elem, sms)
			require.NoError(t, err)
			assert.Equal(t, uint32(BlockSize), block)
			assert.Equal(t, tt.wantGrid, grid, tt.rationale)
		})
	}
}

func TestLaunchDimsScalesWithMultiprocessorCount(t *testing.T) {
	for _, sms := range []int{1, 108, 132, 1 << 30} {
		grid, _, err := LaunchDims(math.MaxInt, 2, sms)
		require.NoError(t, err)
		want := uint32(min(sms*BlocksPerSM, math.MaxInt32))
		assert.Equal(t, want, grid, "%d SMs", sms)
	}
}

func TestLaunchDimsRejectsBadArguments(t *testing.T) {
	tests := []struct {
		name         string
		n, elem, sms int
		msg          string
	}{
		{"negative count", -1, 2, 1, "negative element count -1"},
		{"zero element size", 1, 0, 1, "element size 0"},
		{"element size not dividing 16", 1, 3, 1, "element size 3"},
		{"element size too big", 1, 32, 1, "element size 32"},
		{"no SMs", 1, 2, 0, "multiprocessor count 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := LaunchDims(tt.n, tt.elem, tt.sms)
			require.ErrorIs(t, err, ErrLaunch)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}
