package nccl

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/fakegpu"
)

// dataCalls are the fake driver's calls that move data.
var dataCalls = []string{"AllReduce", "Broadcast", "AllGather", "ReduceScatter", "Send", "Recv",
	"Submit", "MemcpyDtoDAsync", "GroupStart", "GroupEnd"}

// TestOverlappingBuffersAreRejectedBeforeTheLibrary checks every operation with two
// buffers: a send buffer that overlaps the receive buffer anywhere but NCCL's in-place
// position (or receive blocks that overlap each other) races on a GPU, so it fails with
// comm.ErrOverlap on the rank that passes it and never reaches the library; the in-place
// position, buffers apart and buffers a rank does not use pass.
func TestOverlappingBuffersAreRejectedBeforeTheLibrary(t *testing.T) {
	const world = 4
	ones, zeros, prefix := []int{1, 1, 1, 1}, []int{0, 0, 0, 0}, []int{0, 1, 2, 3}
	type call func(b *Backend, c *Communicator) error
	cases := []struct {
		name string
		rank int
		call call
		want error // nil: valid
	}{
		// Backend sizes are in bytes; the element type is bfloat16.
		{"all-gather send = recv+4 on rank 0", 0, func(b *Backend, _ *Communicator) error { return b.AllGather(p+4, p, 8) }, comm.ErrOverlap},
		{"all-gather send = recv on rank 1", 1, func(b *Backend, _ *Communicator) error { return b.AllGather(p, p, 8) }, comm.ErrOverlap},
		{"all-gather send ending inside recv", 2, func(b *Backend, _ *Communicator) error { return b.AllGather(p-4, p, 8) }, comm.ErrOverlap},
		{"all-gather send in recv's last byte", 0, func(b *Backend, _ *Communicator) error { return b.AllGather(p+31, p, 8) }, comm.ErrOverlap},
		{"all-gather in place on rank 1", 1, func(b *Backend, _ *Communicator) error { return b.AllGather(p+8, p, 8) }, nil},
		{"all-gather send right after recv", 0, func(b *Backend, _ *Communicator) error { return b.AllGather(p+32, p, 8) }, nil},
		{"all-gather send right before recv", 3, func(b *Backend, _ *Communicator) error { return b.AllGather(p-8, p, 8) }, nil},
		{"reduce-scatter recv = send+2 on rank 0", 0, func(b *Backend, _ *Communicator) error { return b.ReduceScatter(p, p+2, 8) }, comm.ErrOverlap},
		{"reduce-scatter recv = send on rank 3", 3, func(b *Backend, _ *Communicator) error { return b.ReduceScatter(p, p, 8) }, comm.ErrOverlap},
		{"reduce-scatter in place on rank 3", 3, func(b *Backend, _ *Communicator) error { return b.ReduceScatter(p, p+24, 8) }, nil},
		{"reduce-scatter recv before send", 0, func(b *Backend, _ *Communicator) error { return b.ReduceScatter(p, p-8, 8) }, nil},

		// Communicator sizes are in elements.
		{"typed all-gather send = recv + 1 element", 0, func(_ *Backend, c *Communicator) error { return c.AllGather(p+4, p, 2, comm.Float32) }, comm.ErrOverlap},
		{"typed all-gather in place on rank 2", 2, func(_ *Backend, c *Communicator) error { return c.AllGather(p+16, p, 2, comm.Float32) }, nil},
		{"typed reduce-scatter recv = send on rank 1", 1, func(_ *Backend, c *Communicator) error {
			return c.ReduceScatter(p, p, 2, comm.Float32, comm.Sum)
		}, comm.ErrOverlap},
		{"typed reduce-scatter in place on rank 1", 1, func(_ *Backend, c *Communicator) error {
			return c.ReduceScatter(p, p+8, 2, comm.Float32, comm.Sum)
		}, nil},
		{"all-reduce-into partial overlap", 0, func(_ *Backend, c *Communicator) error {
			return c.AllReduceInto(p, p+4, 2, comm.Float32, comm.Sum)
		}, comm.ErrOverlap},
		{"all-reduce-into in place", 0, func(_ *Backend, c *Communicator) error { return c.AllReduceInto(p, p, 2, comm.Float32, comm.Sum) }, nil},
		{"reduce on root partial overlap", 1, func(_ *Backend, c *Communicator) error {
			return c.Reduce(p+4, p, 2, comm.Float32, comm.Sum, 1)
		}, comm.ErrOverlap},
		{"reduce off root: recv unused", 0, func(_ *Backend, c *Communicator) error { return c.Reduce(p+4, p, 2, comm.Float32, comm.Sum, 1) }, nil},
		{"broadcast-into on root partial overlap", 2, func(_ *Backend, c *Communicator) error {
			return c.BroadcastInto(p, p+1, 4, comm.Int8, 2)
		}, comm.ErrOverlap},
		{"broadcast-into off root: send unused", 0, func(_ *Backend, c *Communicator) error { return c.BroadcastInto(p, p+1, 4, comm.Int8, 2) }, nil},
		{"gather on root: send = recv", 1, func(_ *Backend, c *Communicator) error { return c.Gather(p, p, 1, comm.Int32, 1) }, comm.ErrOverlap},
		{"gather in place on root", 1, func(_ *Backend, c *Communicator) error { return c.Gather(p+4, p, 1, comm.Int32, 1) }, nil},
		{"gather off root: recv unused", 0, func(_ *Backend, c *Communicator) error { return c.Gather(p, p, 1, comm.Int32, 1) }, nil},
		{"scatter on root: recv = send", 2, func(_ *Backend, c *Communicator) error { return c.Scatter(p, p, 1, comm.Int32, 2) }, comm.ErrOverlap},
		{"scatter in place on root", 2, func(_ *Backend, c *Communicator) error { return c.Scatter(p, p+8, 1, comm.Int32, 2) }, nil},
		{"all-to-allv every receive displacement 0", 0, func(_ *Backend, c *Communicator) error {
			return c.AllToAllv(p, ones, prefix, p+64, ones, zeros, comm.Int8)
		}, comm.ErrOverlap},
		{"all-to-allv receive blocks overlap out of rank order", 1, func(_ *Backend, c *Communicator) error {
			return c.AllToAllv(p, ones, prefix, p+64, []int{1, 1, 3, 1}, []int{4, 0, 1, 3}, comm.Int8)
		}, comm.ErrOverlap},
		{"all-to-allv receive blocks adjacent", 0, func(_ *Backend, c *Communicator) error {
			return c.AllToAllv(p, ones, prefix, p+64, ones, prefix, comm.Int8)
		}, nil},
		{"all-to-allv receive blocks apart out of rank order", 0, func(_ *Backend, c *Communicator) error {
			return c.AllToAllv(p, ones, prefix, p+64, ones, []int{3, 0, 2, 1}, comm.Int8)
		}, nil},
		{"all-to-allv send blocks may share data", 0, func(_ *Backend, c *Communicator) error {
			return c.AllToAllv(p, ones, zeros, p+64, ones, prefix, comm.Int8)
		}, nil},
		{"all-to-allv empty receive blocks share a displacement", 0, func(_ *Backend, c *Communicator) error {
			return c.AllToAllv(p, ones, prefix, p+64, []int{1, 0, 0, 1}, []int{0, 1, 1, 1}, comm.Int8)
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := fakegpu.New()
			b := newFakeNCCL(t, f, tc.rank, world)
			f.Log()
			err := tc.call(b, b.Communicator())
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
			var ae *comm.ArgError
			require.ErrorAs(t, err, &ae)
			assert.Contains(t, err.Error(), "overlap")
			assert.Empty(t, f.Named(dataCalls...), "the call reached the library")
			assert.True(t, b.IsHealthy(), "a rejected call leaves the communicator usable")
		})
	}
}
