package comm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

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
			if state == "thread group" || state == "group elsewhere" {
				g.useScope(&groups.open, outsideGroup)
			}
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
