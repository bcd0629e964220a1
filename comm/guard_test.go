package comm

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// same checks that got is what want is: nil, or an error with the same text.
func same(t *testing.T, want, got error, name string) {
	t.Helper()
	if want == nil {
		assert.NoError(t, got, name)
	} else if assert.Error(t, got, name) {
		assert.Equal(t, want.Error(), got.Error(), name)
	}
}

// TestReduceFastPathMatchesChecks checks that guard.reduce's one-test fast path accepts
// exactly what its checks one by one accept, and that every rejection is theirs, for
// every element type (and invalid ones), on an open and a closed guard.
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
					same(t, g.reduceChecks(opAllReduce, ptr, bytes), g.reduce(opAllReduce, ptr, bytes), name)
				}
			}
		}
	}
}

// TestP2PFastPathMatchesChecks checks that guard.p2p's one-test fast path accepts
// exactly what its checks one by one accept, with their errors, on open and closed
// guards of several world sizes.
func TestP2PFastPathMatchesChecks(t *testing.T) {
	ptrs := []DevicePtr{0, 1, 0x10000, ^DevicePtr(0)}
	sizes := []int{-1 << 62, -1, 0, 1, 8, 4097}
	peers := []int{-1 << 62, -2, -1, 0, 1, 2, 3, 7, 8, 1 << 40}
	for _, world := range []int{-1, 0, 1, 2, 8} {
		for _, closed := range []bool{false, true} {
			g := newGuard(0, world, Uint8)
			g.closed.Store(closed)
			for _, ptr := range ptrs {
				for _, bytes := range sizes {
					for _, peer := range peers {
						name := fmt.Sprintf("world=%d closed=%v ptr=%#x bytes=%d peer=%d", world, closed, uint64(ptr), bytes, peer)
						same(t, g.p2pChecks(opSend, "dest", ptr, bytes, peer), g.p2p(opSend, "dest", ptr, bytes, peer), name)
					}
				}
			}
		}
	}
}

// TestReduceAsyncFastPathMatchesChecks is TestReduceFastPathMatchesChecks for
// reduceAsync, which also fails with a group open: on the guard (Single, the Validate
// wrapper) or, for the NCCL types, on the calling thread; another goroutine's group
// does not count.
func TestReduceAsyncFastPathMatchesChecks(t *testing.T) {
	ptrs := []DevicePtr{0, 2, 3, 0x10000, 0x10001}
	sizes := []int{-2, 0, 1, 2, 4096}
	c := newStubNCCL(t, stubDriver{}).Communicator()
	for _, elem := range []DType{-1, Uint8, BFloat16, Float32, Float64} {
		for _, state := range []string{"open", "closed", "guard group", "thread group", "group elsewhere"} {
			g := newGuard(0, 2, elem)
			g.threads = state == "thread group" || state == "group elsewhere"
			done, opened := make(chan struct{}), make(chan error)
			switch state {
			case "closed":
				g.closed.Store(true)
			case "guard group":
				g.depth.Store(1)
			case "thread group":
				require.NoError(t, c.GroupStart())
			case "group elsewhere":
				go func() {
					err := c.GroupStart()
					opened <- err
					<-done
					if err == nil {
						_ = c.GroupEnd()
					}
					close(opened)
				}()
				require.NoError(t, <-opened)
			}
			for _, ptr := range ptrs {
				for _, bytes := range sizes {
					name := fmt.Sprintf("%s %s ptr=%#x bytes=%d", elem, state, uint64(ptr), bytes)
					want := g.outsideGroup(opAllReduceAsync)
					if want == nil {
						want = g.reduceChecks(opAllReduceAsync, ptr, bytes)
					}
					same(t, want, g.reduceAsync(ptr, bytes), name)
				}
			}
			switch state {
			case "thread group":
				require.NoError(t, c.GroupEnd())
			case "group elsewhere":
				close(done)
				<-opened
			}
		}
	}
}

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

// mpiTestPreMulSum is the PreMulSum operator newTypedGuard registers (for Float32).
const mpiTestPreMulSum = ReduceOp(gpulib.NumOps)

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

// TestTypedReduceValidMatchesChecks checks that typedReduceValid's one test accepts
// only what typedReduce accepts, with the same size, and everything typedReduce accepts
// but counts above fastCount and PreMulSum operators (which it leaves to typedReduce).
func TestTypedReduceValidMatchesChecks(t *testing.T) {
	forTypedReduceInputs(func(name string, g *guard, ptr DevicePtr, count int, dt DType, op ReduceOp) {
		bytes, ok := g.typedReduceValid(ptr, count, dt, op)
		want, err := g.typedReduce(ptr, count, dt, op)
		agreeFast(t, name, bytes, ok, want, err, count, op)
	})
}
