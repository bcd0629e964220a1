package commtest

import (
	"context"
	"testing"

	"github.com/ncclgo/ncclgo/comm/nccl"
)

// deviceAPI checks NCCL's device API on every rank: the properties agree with the
// world, the teams with the properties and with each other (NCCL's rules: LSA teams of
// consecutive ranks, all the same size; a rail holds one rank of each), and a device
// communicator made by every rank holds the rank's place. Backends that are not NCCL
// backends, or an NCCL without the API (every rank says ErrUnsupported), lack it.
func (e *env) deviceAPI(t *testing.T) {
	cs := make([]*nccl.Communicator, e.n)
	for r, b := range backendsAs[*nccl.Backend](t, e, CapDeviceAPI, "the backends are not *nccl.Backend") {
		cs[r] = b.Communicator()
	}
	props := make([]nccl.Properties, e.n)
	errs := e.try(t, func(r int) (err error) {
		props[r], err = cs[r].Properties()
		return err
	})
	e.skipUnsupported(t, errs, CapDeviceAPI, "properties")
	for _, r := range e.ranks() {
		require.NoError(t, errs[r], "rank %d", r)
		p := props[r]
		require.Equal(t, [2]int{r, e.n}, [2]int{p.Rank, p.Size}, "properties of rank %d", r)
		require.True(t, p.LSATeams > 0 && e.n%p.LSATeams == 0, "rank %d: %d LSA teams do not divide %d ranks", r, p.LSATeams, e.n)

		c := cs[r]
		world, err := c.TeamWorld()
		require.NoError(t, err)
		require.Equal(t, nccl.Team{Size: e.n, Rank: r, Stride: 1}, world, "world team of rank %d", r)
		lsa, err := c.TeamLSA()
		require.NoError(t, err)
		size := e.n / p.LSATeams
		require.Equal(t, nccl.Team{Size: size, Rank: r % size, Stride: 1}, lsa, "LSA team of rank %d", r)
		rail, err := c.TeamRail()
		require.NoError(t, err)
		require.Equal(t, nccl.Team{Size: p.LSATeams, Rank: r / size, Stride: size}, rail, "rail of rank %d", r)
		for i := range rail.Size {
			w, err := c.TeamRankToWorld(rail, i)
			require.NoError(t, err)
			require.Equal(t, r%size+i*size, w, "rail member %d of rank %d", i, r)
		}
		for i := range lsa.Size {
			w, err := c.TeamRankToWorld(lsa, i)
			require.NoError(t, err)
			require.Equal(t, r-r%size+i, w, "LSA member %d of rank %d", i, r)
			l, err := c.TeamRankToLSA(lsa, i)
			require.NoError(t, err)
			require.Equal(t, i, l)
		}
	}
	if !props[e.ranks()[0]].DeviceAPI {
		t.Skip("the communicator has no device API support (Properties.DeviceAPI): no device communicator")
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.h.Timeout)
	defer cancel()
	dcs := make([]*nccl.DevComm, e.n)
	e.all(t, func(r int) (err error) {
		dcs[r], err = cs[r].NewDevComm(ctx, nccl.DevCommRequirements{LSABarriers: 1})
		return err
	})
	for _, r := range e.ranks() {
		rank, size := dcs[r].Rank()
		require.Equal(t, [2]int{r, e.n}, [2]int{rank, size}, "device communicator of rank %d", r)
		lsaRank, lsaSize := dcs[r].LSA()
		require.Equal(t, [2]int{r % (e.n / props[r].LSATeams), e.n / props[r].LSATeams}, [2]int{lsaRank, lsaSize}, "LSA of rank %d's device communicator", r)
	}
	e.all(t, func(r int) error { return dcs[r].Close() })
}
