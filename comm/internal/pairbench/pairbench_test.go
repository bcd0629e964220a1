package pairbench

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAlternateRunsEachSideExactlyNTimes(t *testing.T) {
	for _, tc := range []struct{ n, block int }{{0, 4}, {1, 4}, {10, 4}, {12, 4}, {7, 0}} {
		var na, nb int
		Alternate(tc.n, tc.block, func(m int) { na += m }, Repeat(func() { nb++ }))
		assert.Equal(t, tc.n, na, "a, n=%d block=%d", tc.n, tc.block)
		assert.Equal(t, tc.n, nb, "b, n=%d block=%d", tc.n, tc.block)
	}
}

func TestBlocksRunsEachOneExactlyNTimesInRotatingOrder(t *testing.T) {
	for _, tc := range []struct{ n, block int }{{0, 4}, {1, 4}, {10, 4}, {12, 4}, {7, 0}} {
		var counts [3]int
		var order []int
		fn := func(i int) func(int) {
			return func(m int) { counts[i] += m; order = append(order, i) }
		}
		per := Blocks(tc.n, tc.block, fn(0), fn(1), fn(2))
		blocks := (tc.n + max(tc.block, 1) - 1) / max(tc.block, 1)
		for i := range counts {
			assert.Equal(t, tc.n, counts[i], "fn %d, n=%d block=%d", i, tc.n, tc.block)
			assert.Len(t, per[i], blocks, "fn %d blocks", i)
		}
		for j := 0; j < blocks; j++ { // block j starts with fns[j%3]
			assert.Equal(t, j%3, order[3*j], "first of block %d", j)
		}
	}
}

func TestMedian(t *testing.T) {
	assert.Zero(t, Median(nil))
	v := []float64{5, 1, 3}
	assert.Equal(t, 3.0, Median(v))
	assert.Equal(t, []float64{5, 1, 3}, v, "left as it was")
	assert.Equal(t, 2.5, Median([]float64{4, 1, 2, 3}))
}
