package comm

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// typedReduceInputs are the input classes of the typed reduce checks: element types and
// operators valid and not (a live PreMulSum operator made for Float32 among them), null,
// aligned and misaligned pointers, and counts from negative through fastCount to ones
// whose size overflows.
var typedReduceInputs = struct {
	types  []DType
	ops    []ReduceOp
	ptrs   []DevicePtr
	counts []int
}{
	types:  append([]DType{-1, DType(len(dtypeInfo)), 1 << 30}, Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, BFloat16, Float32, Float64, Float8E4M3, Float8E5M2),
	ops:    []ReduceOp{-1, Sum, Prod, Max, Min, Avg, Avg + 1, mpiTestPreMulSum, mpiTestPreMulSum + 1, 1 << 30},
	ptrs:   []DevicePtr{0, 1, 2, 4, 6, 8, 0x10001, 0x10004, 1 << 63, ^DevicePtr(0), ^DevicePtr(0) - 7},
	counts: []int{-1 << 62, -1, 0, 1, 2, 3, 1 << 20, fastCount, fastCount + 1, math.MaxInt32, math.MaxInt32 + 1, math.MaxInt/8 + 1, math.MaxInt},
}

// same checks that got is what want is: nil, or an error with the same text.
func same(t *testing.T, want, got error, name string) {
	t.Helper()
	if want == nil {
		assert.NoError(t, got, name)
	} else if assert.Error(t, got, name) {
		assert.Equal(t, want.Error(), got.Error(), name)
	}
}

// mpiTestPreMulSum is the PreMulSum operator newTypedGuard registers (for Float32).
const mpiTestPreMulSum = firstPreMulSum

// newTypedGuard is a guard with a live PreMulSum operator for Float32, open or closed.
func newTypedGuard(closed bool) *guard {
	g := newGuard(0, 2, Float32)
	g.addOp(mpiTestPreMulSum, Float32)
	g.closed.Store(closed)
	return g
}

// forTypedReduceInputs calls f with every combination of typedReduceInputs, on an open
// and a closed newTypedGuard, with a name for it.
func forTypedReduceInputs(f func(name string, g *guard, ptr DevicePtr, count int, dt DType, op ReduceOp)) {
	in := typedReduceInputs
	for _, closed := range []bool{false, true} {
		g := newTypedGuard(closed)
		for _, dt := range in.types {
			for _, op := range in.ops {
				for _, ptr := range in.ptrs {
					for _, count := range in.counts {
						f(fmt.Sprintf("closed=%v %s %s ptr=%#x count=%d", closed, dt, op, uint64(ptr), count), g, ptr, count, dt, op)
					}
				}
			}
		}
	}
}

// agreeFast checks a fast path's verdict (bytes, ok) against the full checks' (want,
// err): ok only where the checks pass, with their size, and every input they pass but
// counts above fastCount and PreMulSum operators. It reports whether the checks failed.
func agreeFast(t *testing.T, name string, bytes int, ok bool, want int, err error, count int, op ReduceOp) (rejected bool) {
	t.Helper()
	switch {
	case ok:
		if assert.NoError(t, err, name) {
			assert.Equal(t, want, bytes, name)
		}
	case err == nil:
		assert.True(t, count > fastCount || op == mpiTestPreMulSum, "%s: valid but not on the fast path", name)
	}
	return err != nil
}
