package guardtest

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
)

// typedReduceInputs are the input classes of the typed reduce checks: element types and
// operators valid and not (a live PreMulSum operator made for Float32 among them), null,
// aligned and misaligned pointers, and counts from negative through fastCount to ones
// whose size overflows.
var typedReduceInputs = struct {
	types  []comm.DType
	ops    []comm.ReduceOp
	ptrs   []comm.DevicePtr
	counts []int
}{
	types:  append([]comm.DType{-1, comm.DType(len(core.DtypeInfo)), 1 << 30}, comm.Int8, comm.Uint8, comm.Int32, comm.Uint32, comm.Int64, comm.Uint64, comm.Float16, comm.BFloat16, comm.Float32, comm.Float64, comm.Float8E4M3, comm.Float8E5M2),
	ops:    []comm.ReduceOp{-1, comm.Sum, comm.Prod, comm.Max, comm.Min, comm.Avg, comm.Avg + 1, mpiTestPreMulSum, mpiTestPreMulSum + 1, 1 << 30},
	ptrs:   []comm.DevicePtr{0, 1, 2, 4, 6, 8, 0x10001, 0x10004, 1 << 63, ^comm.DevicePtr(0), ^comm.DevicePtr(0) - 7},
	counts: []int{-1 << 62, -1, 0, 1, 2, 3, 1 << 20, core.FastCount, core.FastCount + 1, math.MaxInt32, math.MaxInt32 + 1, math.MaxInt/8 + 1, math.MaxInt},
}

// same checks that got is what want is: nil, or an error with the same text.
func Same(t *testing.T, want, got error, name string) {
	t.Helper()
	if want == nil {
		assert.NoError(t, got, name)
	} else if assert.Error(t, got, name) {
		assert.Equal(t, want.Error(), got.Error(), name)
	}
}

// mpiTestPreMulSum is the PreMulSum operator newTypedGuard registers (for Float32).
const mpiTestPreMulSum = core.FirstPreMulSum

// newTypedGuard is a guard with a live PreMulSum operator for Float32, open or closed.
func NewTypedGuard(closed bool) *core.Guard {
	g := core.NewGuard(0, 2, comm.Float32)
	g.AddOp(mpiTestPreMulSum, comm.Float32)
	g.Closed.Store(closed)
	return g
}

// forTypedReduceInputs calls f with every combination of typedReduceInputs, on an open
// and a closed newTypedGuard, with a name for it.
func ForTypedReduceInputs(f func(name string, g *core.Guard, ptr comm.DevicePtr, count int, dt comm.DType, op comm.ReduceOp)) {
	in := typedReduceInputs
	for _, closed := range []bool{false, true} {
		g := NewTypedGuard(closed)
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
func AgreeFast(t *testing.T, name string, bytes int, ok bool, want int, err error, count int, op comm.ReduceOp) (rejected bool) {
	t.Helper()
	switch {
	case ok:
		if assert.NoError(t, err, name) {
			assert.Equal(t, want, bytes, name)
		}
	case err == nil:
		assert.True(t, count > core.FastCount || op == mpiTestPreMulSum, "%s: valid but not on the fast path", name)
	}
	return err != nil
}
