package nccl

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/guardtest"
)

// TestReduceFastPathMatchesChecks checks that guard.reduce's one-test fast path accepts
// exactly what its checks one by one accept, and that every rejection is theirs, for
// every element type (and invalid ones), on an open and a closed guard.
func TestReduceFastPathMatchesChecks(t *testing.T) {
	types := []comm.DType{-1, comm.DType(len(core.DtypeInfo))}
	for i := range core.DtypeInfo {
		types = append(types, comm.DType(i))
	}
	ptrs := []comm.DevicePtr{0, 1, 2, 3, 4, 6, 8, 0x10000, 0x10001, 0x10002, 0x10004, 1 << 63, 1<<63 + 2, ^comm.DevicePtr(0), ^comm.DevicePtr(0) - 7}
	sizes := []int{-8, -2, -1, 0, 1, 2, 3, 4, 6, 8, 12, 16, 4096, 4097, 1 << 40, -1 << 62}
	for _, elem := range types {
		for _, closed := range []bool{false, true} {
			g := core.NewGuard(0, 2, elem)
			g.Closed.Store(closed)
			for _, ptr := range ptrs {
				for _, bytes := range sizes {
					name := fmt.Sprintf("%s closed=%v ptr=%#x bytes=%d", elem, closed, uint64(ptr), bytes)
					guardtest.Same(t, g.ReduceChecks(core.OpAllReduce, ptr, bytes), g.Reduce(core.OpAllReduce, ptr, bytes), name)
				}
			}
		}
	}
}

// TestP2PFastPathMatchesChecks checks that guard.p2p's one-test fast path accepts
// exactly what its checks one by one accept, with their errors, on open and closed
// guards of several world sizes.
func TestP2PFastPathMatchesChecks(t *testing.T) {
	ptrs := []comm.DevicePtr{0, 1, 0x10000, ^comm.DevicePtr(0)}
	sizes := []int{-1 << 62, -1, 0, 1, 8, 4097}
	peers := []int{-1 << 62, -2, -1, 0, 1, 2, 3, 7, 8, 1 << 40}
	for _, world := range []int{-1, 0, 1, 2, 8} {
		for _, closed := range []bool{false, true} {
			g := core.NewGuard(0, world, comm.Uint8)
			g.Closed.Store(closed)
			for _, ptr := range ptrs {
				for _, bytes := range sizes {
					for _, peer := range peers {
						name := fmt.Sprintf("world=%d closed=%v ptr=%#x bytes=%d peer=%d", world, closed, uint64(ptr), bytes, peer)
						guardtest.Same(t, g.P2pChecks(core.OpSend, "dest", ptr, bytes, peer), g.P2p(core.OpSend, "dest", ptr, bytes, peer), name)
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
	ptrs := []comm.DevicePtr{0, 2, 3, 0x10000, 0x10001}
	sizes := []int{-2, 0, 1, 2, 4096}
	c := newStubNCCL(t, stubDriver{}).Communicator()
	for _, elem := range []comm.DType{-1, comm.Uint8, comm.BFloat16, comm.Float32, comm.Float64} {
		for _, state := range []string{"open", "closed", "guard group", "thread group", "group elsewhere"} {
			g := core.NewGuard(0, 2, elem)
			if state == "thread group" || state == "group elsewhere" {
				g.UseScope(&groups.open, outsideGroup)
			}
			done, opened := make(chan struct{}), make(chan error)
			switch state {
			case "closed":
				g.Closed.Store(true)
			case "guard group":
				g.Depth.Store(1)
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
					want := g.OutsideGroup(core.OpAllReduceAsync)
					if want == nil {
						want = g.ReduceChecks(core.OpAllReduceAsync, ptr, bytes)
					}
					guardtest.Same(t, want, g.ReduceAsync(ptr, bytes), name)
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
	guardtest.ForTypedReduceInputs(func(name string, g *core.Guard, ptr comm.DevicePtr, count int, dt comm.DType, op comm.ReduceOp) {
		bytes, ok := g.TypedReduceValid(ptr, count, dt, op)
		want, err := g.TypedReduce(ptr, count, dt, op)
		guardtest.AgreeFast(t, name, bytes, ok, want, err, count, op)
	})
}
