package commtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// RegisterWindow registers a caller's buffer as a window on every rank (a collective
// call), its handles survive AttemptReconnect (the windows are registered again with
// the new communicator, so deregistering afterwards releases the new window), bad
// input never reaches NCCL, and Close deregisters what is left.
func TestRegisterWindowSurvivesReconnect(t *testing.T) {
	const n = 3
	c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16), commtest.WithReconnect())
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			_ = c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	each := func(f func(r int, b *nccl.Backend) error) { t.Helper(); eachBackend(t, c, f) }
	calls := func(call string) int64 {
		v, err := c.Calls(1, call)
		require.NoError(t, err)
		return v
	}
	// Windows need NCCL's memory (ncclMemAlloc or CUDA VMM): three 4 KiB windows inside
	// one symmetric allocation, which is local and registers nothing itself.
	hs := make([][3]nccl.WindowHandle, n)
	each(func(r int, b *nccl.Backend) error {
		base, err := b.SymmetricAlloc(3 * 4096)
		if err != nil {
			return err
		}
		for i := range 3 {
			if hs[r][i], err = b.RegisterWindow(ctx, base+comm.DevicePtr(4096*i), 4096); err != nil {
				return err
			}
		}
		return nil
	})
	assert.NotEqual(t, hs[1][0], hs[1][1])
	assert.Equal(t, int64(3), calls("ncclCommWindowRegister"))

	each(func(_ int, b *nccl.Backend) error { return b.AttemptReconnect(ctx) })
	assert.Equal(t, int64(6), calls("ncclCommWindowRegister"), "every window registered again with the new communicator")
	each(func(r int, b *nccl.Backend) error { return b.DeregisterWindow(hs[r][0]) })
	assert.Equal(t, int64(1), calls("ncclCommWindowDeregister"), "the new window was deregistered (the simulator rejects the old one)")

	b, err := c.NCCL(0)
	require.NoError(t, err)
	before := c.DriverCalls()
	for name, tc := range map[string]struct {
		call func() error
		want error
	}{
		"deregister twice":      {func() error { return b.DeregisterWindow(hs[0][0]) }, comm.ErrUnknownHandle},
		"deregister unknown":    {func() error { return b.DeregisterWindow(12345) }, comm.ErrUnknownHandle},
		"register zero bytes":   {func() error { _, err := b.RegisterWindow(ctx, 0x1000, 0); return err }, comm.ErrInvalidSize},
		"register null pointer": {func() error { _, err := b.RegisterWindow(ctx, 0, 64); return err }, comm.ErrNullPointer},
	} {
		assert.ErrorIs(t, tc.call(), tc.want, name)
	}
	assert.Equal(t, before, c.DriverCalls(), "bad input reached the library")

	closed = true
	require.NoError(t, c.Close())
	assert.Equal(t, int64(3), calls("ncclCommWindowDeregister"), "Close deregistered the windows left")
}

// SymmetricFree deregisters the windows still registered inside the allocation before
// freeing it, and leaves the windows of other allocations registered (Close releases
// those).
func TestSymmetricFreeDeregistersItsWindows(t *testing.T) {
	const n = 2
	c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16))
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			_ = c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	calls := func(call string) int64 {
		v, err := c.Calls(1, call)
		require.NoError(t, err)
		return v
	}
	freed := make([]comm.DevicePtr, n)
	kept := make([]nccl.WindowHandle, n)
	eachBackend(t, c, func(r int, b *nccl.Backend) error {
		p, err := b.SymmetricAlloc(2 * 4096)
		if err != nil {
			return err
		}
		q, err := b.SymmetricAlloc(4096)
		if err != nil {
			return err
		}
		for _, w := range []struct {
			ptr   comm.DevicePtr
			bytes int
		}{{p, 4096}, {p + 4096, 4096}, {q, 4096}} {
			h, err := b.RegisterWindow(ctx, w.ptr, w.bytes)
			if err != nil {
				return err
			}
			kept[r] = h
		}
		freed[r] = p
		return nil
	})
	eachBackend(t, c, func(r int, b *nccl.Backend) error { return b.SymmetricFree(freed[r]) })
	assert.Equal(t, int64(2), calls("ncclCommWindowDeregister"), "the two windows inside the freed allocation")
	b, err := c.NCCL(0)
	require.NoError(t, err)
	require.NoError(t, b.DeregisterWindow(kept[0]), "the other allocation's window stays registered")
	closed = true
	require.NoError(t, c.Close())
	assert.Equal(t, int64(3), calls("ncclCommWindowDeregister"), "Close deregistered rank 1's window left")
}

func TestRegisterWindowNeedsNCCL2273(t *testing.T) {
	c, err := commtest.NewCluster(1, commtest.WithElementType(comm.BFloat16), commtest.WithNCCLVersion(22605))
	require.NoError(t, err)
	defer c.Close()
	b, err := c.NCCL(0)
	require.NoError(t, err)
	p, err := c.Alloc(0, 64)
	require.NoError(t, err)
	_, err = b.RegisterWindow(context.Background(), p, 64)
	require.ErrorIs(t, err, comm.ErrUnsupported)
	assert.Contains(t, err.Error(), "ncclCommWindowRegister needs NCCL 2.27.3 (loaded 2.26.5)")
}
