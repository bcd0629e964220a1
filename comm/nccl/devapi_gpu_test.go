//go:build gpu && cgo

package nccl

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/raw/cuda"
)

// gpuOneRank is a one-rank backend on device 0 of the real GPU, or a skip without one.
func gpuOneRank(t *testing.T) (*Backend, context.Context) {
	t.Helper()
	if err := cuda.Init(0); err != nil {
		t.Skipf("no usable GPU: %v (run make libs; NCCLGO_LIBCUDA selects libcuda)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	id, err := NewUniqueID()
	require.NoError(t, err)
	b, err := New(ctx, id, 0, 1, WithElementType(comm.Float32), WithDevice(0), WithTimeout(30*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Close()) })
	t.Logf("NCCL %d", b.Communicator().Version())
	return b, ctx
}

// needsVersion skips a check the loaded NCCL is too old for, after checking that it
// says so with ErrUnsupported.
func needsVersion(t *testing.T, c *Communicator, since int, err error) {
	t.Helper()
	if c.Version() < since {
		require.ErrorIs(t, err, comm.ErrUnsupported)
		t.Skipf("NCCL %d: %v", c.Version(), err)
	}
}

// TestGPUDeviceAndProperties: ncclCommCuDevice and ncclCommQueryProperties of a
// one-rank communicator on device 0.
func TestGPUDeviceAndProperties(t *testing.T) {
	b, _ := gpuOneRank(t)
	c := b.Communicator()
	dev, err := c.Device()
	require.NoError(t, err)
	assert.Zero(t, dev)
	p, err := c.Properties()
	needsVersion(t, c, versionProperties, err)
	require.NoError(t, err)
	t.Logf("properties: %+v", p)
	assert.Equal(t, 0, p.Rank)
	assert.Equal(t, 1, p.Size)
	assert.Equal(t, 0, p.CUDADevice)
	assert.Equal(t, 1, p.LSATeams, "one rank is one LSA team")
}

// TestGPUTeams: the world, LSA and rail teams of one rank, and the rank conversions.
func TestGPUTeams(t *testing.T) {
	b, _ := gpuOneRank(t)
	c := b.Communicator()
	world, err := c.TeamWorld()
	needsVersion(t, c, versionTeams, err)
	require.NoError(t, err)
	one := Team{Size: 1, Rank: 0, Stride: 1}
	assert.Equal(t, one, world)
	lsa, err := c.TeamLSA()
	require.NoError(t, err)
	assert.Equal(t, one, lsa)
	rail, err := c.TeamRail()
	require.NoError(t, err)
	assert.Equal(t, one, rail)
	r, err := c.TeamRankToWorld(rail, 0)
	require.NoError(t, err)
	assert.Zero(t, r)
	r, err = c.TeamRankToLSA(lsa, 0)
	require.NoError(t, err)
	assert.Zero(t, r)
}

// TestGPUDevComm: a device communicator made and destroyed on the real GPU, holding the
// rank's place in the world and the LSA team.
func TestGPUDevComm(t *testing.T) {
	b, ctx := gpuOneRank(t)
	c := b.Communicator()
	p, err := c.Properties()
	needsVersion(t, c, versionDevComm, err)
	require.NoError(t, err)
	if !p.DeviceAPI {
		_, err := c.NewDevComm(ctx, DevCommRequirements{LSABarriers: 1})
		assert.Error(t, err, "a communicator without device API support")
		t.Skipf("the communicator has no device API support: %v", err)
	}
	dc, err := c.NewDevComm(ctx, DevCommRequirements{LSABarriers: 1})
	require.NoError(t, err)
	rank, size := dc.Rank()
	assert.Equal(t, [2]int{0, 1}, [2]int{rank, size})
	lsaRank, lsaSize := dc.LSA()
	assert.Equal(t, [2]int{0, 1}, [2]int{lsaRank, lsaSize})
	assert.NotEmpty(t, dc.Bytes())
	require.NoError(t, dc.Close())
	assert.ErrorIs(t, dc.Close(), comm.ErrClosed)
	assert.True(t, b.IsHealthy())
}

// TestGPUWindowDevicePointers: the device pointers of a registered window: this rank's
// own byte through the LSA and the peer calls agree, multicast only with multimem.
func TestGPUWindowDevicePointers(t *testing.T) {
	b, ctx := gpuOneRank(t)
	c := b.Communicator()
	if c.Version() < versionDevPointer {
		_, err := b.WindowPeerPointer(1, 0, 0)
		require.Error(t, err)
		t.Skipf("NCCL %d has no window device pointers", c.Version())
	}
	p, err := c.Properties()
	require.NoError(t, err)
	sym, err := b.SymmetricAlloc(1 << 20)
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.SymmetricFree(sym)) }()
	h, err := b.RegisterWindow(ctx, sym, 1<<20)
	require.NoError(t, err)
	peer, err := b.WindowPeerPointer(h, 64, 0)
	require.NoError(t, err)
	assert.NotZero(t, peer)
	lsa, err := b.WindowLSAPointer(h, 64, 0)
	require.NoError(t, err)
	assert.Equal(t, peer, lsa, "rank 0 is LSA member 0")
	base, err := b.WindowPeerPointer(h, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, base+64, peer)
	mm, err := b.WindowMultimemPointer(h, 0)
	require.NoError(t, err)
	if !p.Multimem {
		assert.Zero(t, mm)
	}
	require.NoError(t, b.DeregisterWindow(h))
}
