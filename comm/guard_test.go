package comm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestReduceFastPathMatchesChecks checks that guard.reduce's one-test fast path accepts
// exactly what its checks one by one accept, and that every rejection is theirs, for
// every element type (and an invalid one), on an open and a closed guard.
func TestReduceFastPathMatchesChecks(t *testing.T) {
	types := []DType{-1, DType(len(dtypeInfo))}
	for i := range dtypeInfo {
		types = append(types, DType(i))
	}
	ptrs := []DevicePtr{0, 1, 2, 3, 4, 6, 8, 0x10000, 0x10001, 0x10002, 0x10004, 1 << 63, 1<<63 + 2, ^DevicePtr(0), ^DevicePtr(0) - 7}
	sizes := []int{-8, -2, -1, 0, 1, 2, 3, 4, 6, 8, 12, 16, 4096, 4097, 1 << 40, -1 << 62}
	for _, elem := range types {
		for _, closed := range []bool{false, true} {
			g := newGuard(0, 2, elem)
			g.closed.Store(closed)
			for _, ptr := range ptrs {
				for _, bytes := range sizes {
					name := fmt.Sprintf("%s closed=%v ptr=%#x bytes=%d", elem, closed, uint64(ptr), bytes)
					want := g.reduceChecks(opAllReduce, ptr, bytes)
					got := g.reduce(opAllReduce, ptr, bytes)
					if want == nil {
						assert.NoError(t, got, name)
					} else if assert.Error(t, got, name) {
						assert.Equal(t, want.Error(), got.Error(), name)
					}
				}
			}
		}
	}
}
