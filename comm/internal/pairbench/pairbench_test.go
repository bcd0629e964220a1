package pairbench

import (
	"testing"
	"time"

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

func TestAlternateMedianRunsBothSidesAndSyncsEveryBlock(t *testing.T) {
	var na, nb, syncs int
	var order []byte
	m := AlternateMedian(4, 3, func() { syncs++ },
		func(n int) { na += n; order = append(order, 'a') },
		func(n int) { nb += n; order = append(order, 'b') })
	assert.Equal(t, 12, na)
	assert.Equal(t, 12, nb)
	assert.Equal(t, 8, syncs, "one sync before every block")
	assert.Equal(t, "abbaabba", string(order), "the first side alternates")
	assert.Equal(t, 4, m.Rounds)
}

func TestSummarizeKeepsTheUndisturbedRounds(t *testing.T) {
	ms := time.Millisecond
	// Round 2 of side a was disturbed (100x); round 4 of side b (ratio 0.1).
	ta := []time.Duration{10 * ms, 11 * ms, 1000 * ms, 10 * ms, 10 * ms}
	tb := []time.Duration{5 * ms, 5 * ms, 5 * ms, 6 * ms, 100 * ms}
	m := summarize(ta, tb, 10)
	assert.Equal(t, 5, m.Rounds)
	assert.Equal(t, ms, m.A, "median of a's rounds per call")
	assert.Equal(t, ms/2, m.B, "median of b's rounds per call")
	assert.InDelta(t, 2.0, m.Ratio, 1e-9, "median of the ratios 2, 2.2, 200, 1.67, 0.1")
	assert.Equal(t, 1000*ms, ta[2], "the caller's slices are not reordered")
	even := summarize(ta[:4], tb[:4], 1)
	assert.Equal(t, 10500*time.Microsecond, even.A, "an even count takes the mean of the middle two")
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
