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
