package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// TestElasticArgumentChecksAreNCCLs checks the argument rules that ncclCommGrow,
// ncclCommGetUniqueId, ncclCommSuspend/Resume and ncclCommMemStats apply before
// anything else (src/init.cc, src/mem_manager.cc): the same calls give
// ncclInvalidArgument on the real libnccl 2.29.7 (rawdriver's
// TestElasticCallsReachTheRealLibrary).
func TestElasticArgumentChecksAreNCCLs(t *testing.T) {
	w := newWorld(t, 1)
	d, err := w.Driver(0)
	require.NoError(t, err)
	id := w.NewUniqueID()
	calls := map[string]func() error{
		"CommGetUniqueID": func() error { _, err := d.CommGetUniqueID(0); return err },
		"CommSuspend":     func() error { return d.CommSuspend(0, gpulib.SuspendMem) },
		"CommResume":      func() error { return d.CommResume(0) },
		"CommMemStats":    func() error { _, err := d.CommMemStats(0, gpulib.StatMemTotal); return err },
		"CommGrow/no ranks": func() error {
			_, err := d.CommGrow(0, 0, &id, 0, gpulib.Config{Blocking: true})
			return err
		},
		"CommGrow/newcomer without id": func() error {
			_, err := d.CommGrow(0, 2, nil, 1, gpulib.Config{Blocking: true})
			return err
		},
		"CommGrow/newcomer without rank": func() error {
			_, err := d.CommGrow(0, 2, &id, -1, gpulib.Config{Blocking: true})
			return err
		},
		"CommGrow/newcomer past the size": func() error {
			_, err := d.CommGrow(0, 2, &id, 2, gpulib.Config{Blocking: true})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, gpulib.InvalidArgument, ncclCode(call()))
		})
	}
}

// twoOfThree is a world of three devices whose first two share a communicator.
func twoOfThree(t *testing.T, opts ...Option) (*World, []*Driver, []gpulib.Comm) {
	t.Helper()
	w := newWorld(t, 3, opts...)
	ds := make([]*Driver, 3)
	for i := range ds {
		var err error
		ds[i], err = w.Driver(i)
		require.NoError(t, err)
	}
	id := w.NewUniqueID()
	cs := make([]gpulib.Comm, 2)
	errs := make(chan error, 2)
	for i := range cs {
		go func() {
			var err error
			cs[i], err = ds[i].CommInitRank(2, id, i, gpulib.Config{Blocking: true})
			errs <- err
		}()
	}
	for range cs {
		require.NoError(t, <-errs)
	}
	return w, ds, cs
}

func TestGrowNonBlockingCompletesWhenTheNewcomerArrives(t *testing.T) {
	_, ds, cs := twoOfThree(t)
	id, err := ds[0].CommGetUniqueID(cs[0])
	require.NoError(t, err)
	nb := gpulib.Config{Blocking: false}
	g0, err := ds[0].CommGrow(cs[0], 3, &id, -1, nb)
	assert.Equal(t, gpulib.InProgress, ncclCode(err))
	g1, err := ds[1].CommGrow(cs[1], 3, nil, -1, nb)
	assert.Equal(t, gpulib.InProgress, ncclCode(err))
	res, err := ds[0].CommGetAsyncError(g0)
	require.NoError(t, err)
	assert.Equal(t, gpulib.InProgress, res, "the newcomer has not arrived")
	g2, err := ds[2].CommGrow(0, 3, &id, 2, nb)
	require.NoError(t, err, "the last rank completes the grow")
	for i, g := range []gpulib.Comm{g0, g1, g2} {
		res, err := ds[i].CommGetAsyncError(g)
		require.NoError(t, err)
		assert.Equal(t, gpulib.Success, res, "rank %d", i)
		n, err := ds[i].CommCount(g)
		require.NoError(t, err)
		assert.Equal(t, 3, n)
		r, err := ds[i].CommUserRank(g)
		require.NoError(t, err)
		assert.Equal(t, i, r, "existing ranks keep theirs")
	}
	_, err = ds[2].CommGrow(0, 3, &id, 2, nb)
	assert.Equal(t, gpulib.SystemError, ncclCode(err), "the id is used up")
	_, err = ds[0].CommGetUniqueID(cs[0])
	assert.NoError(t, err, "the parent may grow again")
}

func TestGrowNewcomerTakingAnExistingRankFailsTheGrow(t *testing.T) {
	_, ds, cs := twoOfThree(t)
	id, err := ds[0].CommGetUniqueID(cs[0])
	require.NoError(t, err)
	nb := gpulib.Config{Blocking: false}
	g0, err := ds[0].CommGrow(cs[0], 3, &id, -1, nb)
	assert.Equal(t, gpulib.InProgress, ncclCode(err))
	_, err = ds[2].CommGrow(0, 3, &id, 1, nb)
	assert.Equal(t, gpulib.InvalidUsage, ncclCode(err))
	res, err := ds[0].CommGetAsyncError(g0)
	require.NoError(t, err)
	assert.Equal(t, gpulib.InvalidUsage, res, "the waiting rank learns it")
}

func TestSuspendedCommunicatorRefusesWorkUntilResume(t *testing.T) {
	r := newRig(t, 2)
	p := r.alloc(t, 16, nil)
	r.each(t, func(i int) error { return r.d[i].CommSuspend(r.c[i], gpulib.SuspendMem) })
	err := r.d[0].AllReduce(p[0], p[0], 4, gpulib.Float32, gpulib.Sum, r.c[0], r.s[0])
	assert.Equal(t, gpulib.InvalidUsage, ncclCode(err))
	assert.Equal(t, gpulib.InvalidUsage, ncclCode(r.d[0].CommSuspend(r.c[0], gpulib.SuspendMem)), "already suspended")
	v, err := r.d[0].CommMemStats(r.c[0], gpulib.StatMemSuspended)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), v)
	_, err = r.d[0].CommMemStats(r.c[0], 4)
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(err))
	r.each(t, func(i int) error { return r.d[i].CommResume(r.c[i]) })
	assert.Equal(t, gpulib.InvalidUsage, ncclCode(r.d[0].CommResume(r.c[0])), "not suspended")
	r.each(t, func(i int) error {
		return r.d[i].AllReduce(p[i], p[i], 4, gpulib.Float32, gpulib.Sum, r.c[i], r.s[i])
	})
	r.sync(t)
}

func TestElasticCallsNeedTheirVersion(t *testing.T) {
	for _, v := range []int{21803, 22203} {
		r := newRig(t, 1, WithVersion(v))
		_, err := r.d[0].CommGetUniqueID(r.c[0])
		var m *MissingSymbolError
		require.ErrorAs(t, err, &m)
		assert.Equal(t, sinceGrow, m.Since)
		require.ErrorAs(t, r.d[0].CommSuspend(r.c[0], gpulib.SuspendMem), &m)
		assert.Equal(t, sinceSuspend, m.Since)
	}
}
