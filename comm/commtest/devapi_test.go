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
	rawnccl "github.com/ncclgo/ncclgo/raw/nccl"
)

func devCluster(t *testing.T, n int, opts ...commtest.Option) *commtest.Cluster {
	t.Helper()
	c, err := commtest.NewCluster(n, append([]commtest.Option{commtest.WithElementType(comm.BFloat16)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Four ranks on two nodes of two GPUs: the properties, teams and rank conversions NCCL
// computes (nccl_device/core.cc, dev_runtime.cc's LSA rule).
func TestDeviceAPIPropertiesAndTeamsOfTwoNodes(t *testing.T) {
	c := devCluster(t, 4, commtest.WithMachine(commtest.Machine{GPUsPerNode: 2, GinType: int(nccl.GINProxy), HostRMA: true}))
	eachBackend(t, c, func(r int, b *nccl.Backend) error {
		cm := b.Communicator()
		p, err := cm.Properties()
		if err != nil {
			return err
		}
		assert.Equal(t, nccl.Properties{Rank: r, Size: 4, CUDADevice: r, NVMLDevice: r, DeviceAPI: true,
			GIN: nccl.GINProxy, RailedGIN: nccl.GINProxy, LSATeams: 2, HostRMA: true}, p, "rank %d", r)
		dev, err := cm.Device()
		assert.NoError(t, err)
		assert.Equal(t, r, dev)

		world, err := cm.TeamWorld()
		assert.NoError(t, err)
		assert.Equal(t, nccl.Team{Size: 4, Rank: r, Stride: 1}, world)
		lsa, err := cm.TeamLSA()
		assert.NoError(t, err)
		assert.Equal(t, nccl.Team{Size: 2, Rank: r % 2, Stride: 1}, lsa)
		rail, err := cm.TeamRail()
		assert.NoError(t, err)
		assert.Equal(t, nccl.Team{Size: 2, Rank: r / 2, Stride: 2}, rail)
		for i := range 2 {
			w, err := cm.TeamRankToWorld(rail, i)
			assert.NoError(t, err)
			assert.Equal(t, r%2+2*i, w, "rail member %d of rank %d", i, r)
			w, err = cm.TeamRankToWorld(lsa, i)
			assert.NoError(t, err)
			assert.Equal(t, r/2*2+i, w, "LSA member %d of rank %d", i, r)
			l, err := cm.TeamRankToLSA(lsa, i)
			assert.NoError(t, err)
			assert.Equal(t, i, l)
		}
		return nil
	})
}

// NCCL's LSA team has the same size on every rank: nodes of 3 and 1 GPUs give teams of
// one rank (the greatest common divisor of the runs of ranks per node).
func TestDeviceAPILSATeamIsTheCommonDivisorOfTheNodes(t *testing.T) {
	c := devCluster(t, 4, commtest.WithMachine(commtest.Machine{GPUsPerNode: 3}))
	eachBackend(t, c, func(r int, b *nccl.Backend) error {
		lsa, err := b.Communicator().TeamLSA()
		assert.Equal(t, nccl.Team{Size: 1, Rank: 0, Stride: 1}, lsa)
		p, perr := b.Communicator().Properties()
		assert.NoError(t, perr)
		assert.Equal(t, 4, p.LSATeams)
		return err
	})
}

// A device communicator is made and destroyed from Go; the simulated NCCL checks the
// requirements as NCCL does, and bad input never reaches it.
func TestDevCommCreateChecksRequirements(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := devCluster(t, 2)
	dcs := make([]*nccl.DevComm, 2)
	eachBackend(t, c, func(r int, b *nccl.Backend) (err error) {
		dcs[r], err = b.Communicator().NewDevComm(ctx, nccl.DevCommRequirements{LSABarriers: 2})
		return err
	})
	for r, dc := range dcs {
		rank, size := dc.Rank()
		assert.Equal(t, [2]int{r, 2}, [2]int{rank, size})
		lsaRank, lsaSize := dc.LSA()
		assert.Equal(t, [2]int{r, 2}, [2]int{lsaRank, lsaSize})
		assert.Len(t, dc.Bytes(), 240, "sizeof(ncclDevComm) of nccl.h 2.30.7")
		require.NoError(t, dc.Close())
		assert.ErrorIs(t, dc.Close(), comm.ErrClosed)
		assert.Nil(t, dc.Bytes())
	}
	assert.ErrorIs(t, (&nccl.DevComm{}).Close(), comm.ErrClosed)
	calls := func(call string) int64 {
		v, err := c.Calls(0, call)
		require.NoError(t, err)
		return v
	}
	assert.Equal(t, int64(1), calls("ncclDevCommCreate"))
	assert.Equal(t, int64(1), calls("ncclDevCommDestroy"))

	b, err := c.NCCL(0)
	require.NoError(t, err)
	cm := b.Communicator()
	for name, tc := range map[string]struct {
		req  nccl.DevCommRequirements
		want rawnccl.Result
	}{
		"multicast without multimem": {nccl.DevCommRequirements{LSAMultimem: true}, rawnccl.InvalidArgument},
		"GIN signals without GIN":    {nccl.DevCommRequirements{GINSignals: 4}, rawnccl.InvalidArgument},
		"GIN on a machine without":   {nccl.DevCommRequirements{GIN: nccl.GINConnectionFull}, rawnccl.InvalidArgument},
	} {
		_, err := cm.NewDevComm(ctx, tc.req)
		assert.ErrorIs(t, err, tc.want, name)
	}
	assert.Equal(t, int64(4), calls("ncclDevCommCreate"))
	before := c.DriverCalls()
	_, err = cm.NewDevComm(ctx, nccl.DevCommRequirements{LSABarriers: -1})
	assert.ErrorIs(t, err, comm.ErrInvalidSize)
	_, err = cm.NewDevComm(ctx, nccl.DevCommRequirements{GIN: 7})
	assert.ErrorIs(t, err, comm.ErrUnsupported)
	_, err = cm.TeamRankToWorld(nccl.Team{Size: 2, Rank: 0, Stride: 1}, 2)
	assert.ErrorIs(t, err, comm.ErrInvalidRank)
	_, err = cm.TeamRankToWorld(nccl.Team{}, 0)
	assert.ErrorIs(t, err, comm.ErrInvalidRank)
	assert.Equal(t, before, c.DriverCalls(), "bad input reached the library")
}

// A machine whose GIN connects only the rails refuses a full GIN connection; one
// without symmetric memory support refuses every device communicator (ncclInvalidUsage).
func TestDevCommCreateFollowsTheMachine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := devCluster(t, 1, commtest.WithMachine(commtest.Machine{GinType: int(nccl.GINGDAKI), GinRailOnly: true, Multimem: true}))
	b, err := c.NCCL(0)
	require.NoError(t, err)
	cm := b.Communicator()
	_, err = cm.NewDevComm(ctx, nccl.DevCommRequirements{GIN: nccl.GINConnectionFull})
	assert.ErrorIs(t, err, rawnccl.InvalidArgument)
	dc, err := cm.NewDevComm(ctx, nccl.DevCommRequirements{GIN: nccl.GINConnectionRail, GINSignals: 8, LSAMultimem: true})
	require.NoError(t, err)
	require.NoError(t, dc.Close())

	c = devCluster(t, 1, commtest.WithMachine(commtest.Machine{NoDeviceAPI: true}))
	b, err = c.NCCL(0)
	require.NoError(t, err)
	p, err := b.Communicator().Properties()
	require.NoError(t, err)
	assert.False(t, p.DeviceAPI)
	_, err = b.Communicator().NewDevComm(ctx, nccl.DevCommRequirements{})
	assert.ErrorIs(t, err, rawnccl.InvalidUsage)
}

// Window device pointers: a peer in the caller's LSA team is reached at its window's
// address; one outside gives NULL; the LSA index must lie in the team.
func TestWindowDevicePointers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 4
	c := devCluster(t, n, commtest.WithMachine(commtest.Machine{GPUsPerNode: 2}))
	bases := make([]comm.DevicePtr, n)
	hs := make([]nccl.WindowHandle, n)
	eachBackend(t, c, func(r int, b *nccl.Backend) (err error) {
		if bases[r], err = b.SymmetricAlloc(2 * 4096); err != nil {
			return err
		}
		if _, err = b.RegisterWindow(ctx, bases[r], 4096); err != nil {
			return err
		}
		hs[r], err = b.RegisterWindow(ctx, bases[r]+4096, 4096)
		return err
	})
	eachBackend(t, c, func(r int, b *nccl.Backend) error {
		for peer := range n {
			p, err := b.WindowPeerPointer(hs[r], 100, peer)
			assert.NoError(t, err)
			if peer/2 == r/2 {
				assert.Equal(t, bases[peer]+4096+100, p, "rank %d, peer %d: the peer's second window", r, peer)
			} else {
				assert.Zero(t, p, "rank %d, peer %d is on another node", r, peer)
			}
		}
		for l := range 2 {
			p, err := b.WindowLSAPointer(hs[r], 8, l)
			assert.NoError(t, err)
			assert.Equal(t, bases[r/2*2+l]+4096+8, p)
		}
		_, err := b.WindowLSAPointer(hs[r], 8, 2)
		assert.ErrorIs(t, err, rawnccl.InvalidArgument, "NCCL checks the LSA index")
		p, err := b.WindowMultimemPointer(hs[r], 0)
		assert.NoError(t, err)
		assert.Zero(t, p, "no multicast memory on this machine")
		return nil
	})
	b, err := c.NCCL(0)
	require.NoError(t, err)
	before := c.DriverCalls()
	_, err = b.WindowPeerPointer(hs[0], 4096, 1)
	assert.ErrorIs(t, err, comm.ErrInvalidSize)
	_, err = b.WindowPeerPointer(hs[0], 0, n)
	assert.ErrorIs(t, err, comm.ErrInvalidRank)
	_, err = b.WindowLSAPointer(12345, 0, 0)
	assert.ErrorIs(t, err, comm.ErrUnknownHandle)
	assert.Equal(t, before, c.DriverCalls(), "bad input reached the library")
}

// The simulated older NCCLs (2.18, 2.22, 2.28, 2.29.2) refuse what they lack, naming the
// version that has it (2.29.7 where 2.29.2's structs have another layout); nothing
// reaches the library.
func TestDeviceAPINeedsItsNCCLVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, v := range []int{21805, 22203, 22809, 22902} {
		c := devCluster(t, 1, commtest.WithNCCLVersion(v))
		b, err := c.NCCL(0)
		require.NoError(t, err)
		cm := b.Communicator()
		before := c.DriverCalls()
		_, err = cm.Properties()
		assert.ErrorIs(t, err, comm.ErrUnsupported)
		assert.ErrorContains(t, err, "ncclCommQueryProperties needs NCCL 2.29.7")
		_, err = cm.NewDevComm(ctx, nccl.DevCommRequirements{})
		assert.ErrorContains(t, err, "ncclDevCommCreate needs NCCL 2.29.7")
		_, err = cm.TeamWorld()
		if v < 22803 {
			assert.ErrorIs(t, err, comm.ErrUnsupported)
			assert.ErrorContains(t, err, "ncclTeamWorld needs NCCL 2.28.3")
			assert.Equal(t, before, c.DriverCalls())
		} else {
			assert.NoError(t, err)
		}
	}
}

// struct ncclDevComm changed its layout in NCCL 2.30.3 (magic and version first): the
// rank and LSA fields are read where the simulated version puts them.
func TestDevCommLayoutFollowsTheNCCLVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, v := range []int{22907, 23007} {
		c := devCluster(t, 3, commtest.WithNCCLVersion(v), commtest.WithMachine(commtest.Machine{GPUsPerNode: 3}))
		eachBackend(t, c, func(r int, b *nccl.Backend) error {
			dc, err := b.Communicator().NewDevComm(ctx, nccl.DevCommRequirements{})
			if err != nil {
				return err
			}
			rank, size := dc.Rank()
			lsaRank, lsaSize := dc.LSA()
			assert.Equal(t, [4]int{r, 3, r, 3}, [4]int{rank, size, lsaRank, lsaSize}, "NCCL %d, rank %d", v, r)
			return dc.Close()
		})
	}
}

// ncclDevCommCreate is collective: a rank that creates a device communicator alone waits
// for the others, until the operation timeout, as with a window registration.
func TestDevCommCreateWaitsForEveryRank(t *testing.T) {
	c := devCluster(t, 2, commtest.WithCommOptions(nccl.WithTimeout(300*time.Millisecond)))
	b, err := c.NCCL(0)
	require.NoError(t, err)
	_, err = b.Communicator().NewDevComm(context.Background(), nccl.DevCommRequirements{})
	assert.ErrorIs(t, err, comm.ErrTimeout)
	assert.False(t, b.IsHealthy())
}
