package sim

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

func TestFinalizeThenDestroy(t *testing.T) {
	r := newRig(t, 2)
	r.each(t, func(i int) error { return r.d[i].CommFinalize(r.c[i]) })
	for i := range 2 {
		res, err := r.d[i].CommGetAsyncError(r.c[i])
		require.NoError(t, err)
		assert.Equal(t, gpulib.Success, res)
		p, _ := r.w.Alloc(i, 4)
		assert.Equal(t, gpulib.InvalidUsage, ncclCode(r.d[i].AllReduce(p, p, 1, gpulib.Int32, gpulib.Sum, r.c[i], r.s[i])), "work after finalize")
		assert.Equal(t, gpulib.InvalidUsage, ncclCode(r.d[i].CommFinalize(r.c[i])), "finalize twice")
		require.NoError(t, r.d[i].CommDestroy(r.c[i]))
		_, err = r.d[i].CommGetAsyncError(r.c[i])
		assert.Equal(t, gpulib.InvalidArgument, ncclCode(err), "use after destroy")
		u, err := r.w.Usage(i)
		require.NoError(t, err)
		assert.Zero(t, u.Comms)
	}
}

func TestNonBlockingFinalizeIsInProgressUntilPendingWorkCompletes(t *testing.T) {
	w := newWorld(t, 2)
	d := []*Driver{w.drivers[0], w.drivers[1]}
	id, _ := d[0].GetUniqueID()
	c := make([]gpulib.Comm, 2)
	for i := range 2 {
		var err error
		c[i], err = d[i].CommInitRank(2, id, i, gpulib.Config{})
		require.True(t, err == nil || ncclCode(err) == gpulib.InProgress)
	}
	p, _ := w.Alloc(0, 4)
	require.NoError(t, d[0].AllReduce(p, p, 1, gpulib.Int32, gpulib.Sum, c[0], 0))
	assert.Equal(t, gpulib.InProgress, ncclCode(d[0].CommFinalize(c[0])), "rank 1 has not joined the all-reduce")
	res, _ := d[0].CommGetAsyncError(c[0])
	assert.Equal(t, gpulib.InProgress, res)

	q, _ := w.Alloc(1, 4)
	require.NoError(t, d[1].AllReduce(q, q, 1, gpulib.Int32, gpulib.Sum, c[1], 0))
	assert.True(t, eventually(5*time.Second, func() bool {
		res, _ := d[0].CommGetAsyncError(c[0])
		return res == gpulib.Success
	}))
	require.NoError(t, d[0].CommDestroy(c[0]))
	require.NoError(t, d[1].CommDestroy(c[1]), "destroy without finalize flushes and succeeds")
}

func TestDestroyWaitsForPendingWorkAndAbortDoesNot(t *testing.T) {
	r := newRig(t, 2)
	bufs := r.alloc(t, 4, nil)
	require.NoError(t, r.d[0].AllReduce(bufs[0], bufs[0], 1, gpulib.Int32, gpulib.Sum, r.c[0], r.s[0]))
	destroyed := make(chan error, 1)
	go func() { destroyed <- r.d[0].CommDestroy(r.c[0]) }()
	select {
	case err := <-destroyed:
		t.Fatalf("destroy returned %v while an all-reduce waits for rank 1", err)
	case <-time.After(30 * time.Millisecond):
	}
	require.NoError(t, r.d[1].AllReduce(bufs[1], bufs[1], 1, gpulib.Int32, gpulib.Sum, r.c[1], r.s[1]))
	within(t, 5*time.Second, func() { require.NoError(t, <-destroyed) })

	require.NoError(t, r.d[1].Send(bufs[1], 1, gpulib.Int32, 0, r.c[1], r.s[1])) // never received
	within(t, 5*time.Second, func() { require.NoError(t, r.d[1].CommAbort(r.c[1])) })
	r.sync(t)
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(r.d[1].CommAbort(r.c[1])), "abort twice")
	_, err := r.d[1].CommRegister(r.c[1], bufs[1], 4)
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(err), "use after abort")
}

func TestRevokeStopsInFlightWorkAndRefusesNewWork(t *testing.T) {
	r := newRig(t, 2)
	bufs := r.alloc(t, 4, nil)
	require.NoError(t, r.d[0].AllReduce(bufs[0], bufs[0], 1, gpulib.Int32, gpulib.Sum, r.c[0], r.s[0]))
	require.NoError(t, r.d[0].CommRevoke(r.c[0], 0))
	within(t, 5*time.Second, func() { require.NoError(t, r.d[0].StreamSynchronize(r.s[0])) })
	res, err := r.d[0].CommGetAsyncError(r.c[0])
	require.NoError(t, err)
	assert.Equal(t, gpulib.Success, res, "quiescent after revoke")
	assert.Equal(t, gpulib.InvalidUsage, ncclCode(r.d[0].AllReduce(bufs[0], bufs[0], 1, gpulib.Int32, gpulib.Sum, r.c[0], r.s[0])))
	assert.Equal(t, gpulib.InvalidUsage, ncclCode(r.d[0].CommFinalize(r.c[0])), "finalize after revoke")
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(r.d[1].CommRevoke(r.c[1], 1)), "unknown flags")
	require.NoError(t, r.d[0].CommDestroy(r.c[0]))
}

func TestSplitByColorAndKey(t *testing.T) {
	r := newRig(t, 4)
	colors := []int{0, 1, 0, gpulib.SplitNoColor}
	keys := []int{5, 0, 1, 0}
	child := make([]gpulib.Comm, 4)
	r.each(t, func(i int) error {
		var err error
		child[i], err = r.d[i].CommSplit(r.c[i], colors[i], keys[i], gpulib.Config{Blocking: true})
		return err
	})
	assert.Zero(t, child[3], "NCCL_SPLIT_NOCOLOR gives no communicator")
	wantRank := []int{1, 0, 0}
	wantSize := []int{2, 1, 2}
	for i := range 3 {
		n, err := r.d[i].CommCount(child[i])
		require.NoError(t, err)
		rank, err := r.d[i].CommUserRank(child[i])
		require.NoError(t, err)
		assert.Equal(t, wantSize[i], n, "rank %d", i)
		assert.Equal(t, wantRank[i], rank, "rank %d (ordered by key)", i)
	}
	bufs := r.alloc(t, 4, func(i int) []byte { return int32s([]int32{int32(i + 1)}) })
	for _, i := range []int{0, 2} {
		go func() { _ = r.d[i].AllReduce(bufs[i], bufs[i], 1, gpulib.Int32, gpulib.Sum, child[i], r.s[i]) }()
	}
	within(t, 5*time.Second, func() {
		for _, i := range []int{0, 2} {
			for !eventually(time.Second, func() bool { b := r.read(t, i, bufs[i], 4); return b[0] == 4 }) {
			}
		}
	})
	_, err := r.d[0].CommSplit(r.c[0], -2, 0, gpulib.Config{Blocking: true})
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(err), "color below NCCL_SPLIT_NOCOLOR")
}

func TestNonBlockingSplitReportsInProgressOnParentAndChild(t *testing.T) {
	r := newRig(t, 2)
	c0, err := r.d[0].CommSplit(r.c[0], 0, 0, gpulib.Config{})
	assert.Equal(t, gpulib.InProgress, ncclCode(err))
	require.NotZero(t, c0)
	res, _ := r.d[0].CommGetAsyncError(r.c[0])
	assert.Equal(t, gpulib.InProgress, res, "parent")
	res, _ = r.d[0].CommGetAsyncError(c0)
	assert.Equal(t, gpulib.InProgress, res, "child")
	_, err = r.d[1].CommSplit(r.c[1], 0, 0, gpulib.Config{})
	require.NoError(t, err)
	for _, c := range []gpulib.Comm{r.c[0], c0} {
		res, _ = r.d[0].CommGetAsyncError(c)
		assert.Equal(t, gpulib.Success, res)
	}
}

func TestShrinkExcludesADeadRank(t *testing.T) {
	r := newRig(t, 3)
	bufs := r.alloc(t, 4, func(i int) []byte { return int32s([]int32{int32(i + 1)}) })
	require.NoError(t, r.w.Kill(2))
	// Survivors start an all-reduce that can never complete, then shrink with abort.
	for i := range 2 {
		require.NoError(t, r.d[i].AllReduce(bufs[i], bufs[i], 1, gpulib.Int32, gpulib.Sum, r.c[i], r.s[i]))
	}
	child := make([]gpulib.Comm, 2)
	errs := make([]error, 2)
	within(t, 5*time.Second, func() {
		done := make(chan int, 2)
		for i := range 2 {
			go func() {
				child[i], errs[i] = r.d[i].CommShrink(r.c[i], []int{2}, gpulib.Config{Blocking: true}, gpulib.ShrinkAbort)
				done <- i
			}()
		}
		<-done
		<-done
	})
	for i := range 2 {
		require.NoError(t, errs[i])
		n, err := r.d[i].CommCount(child[i])
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		require.NoError(t, r.d[i].StreamSynchronize(r.s[i]), "the aborted all-reduce ended")
	}
	// The survivors' new communicator works.
	for i := range 2 {
		require.NoError(t, r.w.Write(i, bufs[i], int32s([]int32{int32(10 * (i + 1))})))
	}
	done := make(chan error, 2)
	for i := range 2 {
		go func() { done <- r.d[i].AllReduce(bufs[i], bufs[i], 1, gpulib.Int32, gpulib.Sum, child[i], r.s[i]) }()
	}
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	for i := range 2 {
		require.NoError(t, r.d[i].StreamSynchronize(r.s[i]))
		assert.Equal(t, int32s([]int32{30}), r.read(t, i, bufs[i], 4))
	}
}

func TestShrinkMisuse(t *testing.T) {
	r := newRig(t, 3)
	tests := []struct {
		name    string
		exclude []int
		flags   int
	}{
		{"excluded rank out of range", []int{3}, 0},
		{"rank excluded twice", []int{2, 2}, 0},
		{"rank excludes itself", []int{0}, 0},
		{"unknown flags", []int{2}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.d[0].CommShrink(r.c[0], tt.exclude, gpulib.Config{Blocking: true}, tt.flags)
			assert.Equal(t, gpulib.InvalidArgument, ncclCode(err))
		})
	}
	// Survivors that disagree on the excluded ranks.
	_, err := r.d[0].CommShrink(r.c[0], []int{2}, gpulib.Config{}, 0)
	assert.Equal(t, gpulib.InProgress, ncclCode(err))
	_, err = r.d[1].CommShrink(r.c[1], []int{0, 2}, gpulib.Config{}, 0)
	assert.Equal(t, gpulib.InvalidUsage, ncclCode(err))
}

func TestVersionGatesNewerFunctions(t *testing.T) {
	r := newRig(t, 1, WithVersion(22203))
	d, c := r.d[0], r.c[0]
	v, err := d.Version()
	require.NoError(t, err)
	assert.Equal(t, 22203, v)
	var missing *MissingSymbolError
	_, err = d.CommShrink(c, nil, gpulib.Config{Blocking: true}, 0)
	require.True(t, errors.As(err, &missing), "%v", err)
	assert.Equal(t, 22703, missing.Since)
	require.ErrorAs(t, d.CommRevoke(c, 0), &missing)
	_, err = d.CommWindowRegister(c, 0, 1, 0)
	require.ErrorAs(t, err, &missing)
	_, err = d.MemAllocNCCL(64)
	assert.NoError(t, err, "ncclMemAlloc exists in 2.22")
	_, err = New(1, WithVersion(21300))
	assert.Error(t, err)
}

func TestRegistration(t *testing.T) {
	r := newRig(t, 1)
	d, c := r.d[0], r.c[0]
	p, _ := r.w.Alloc(0, 64)
	h, err := d.CommRegister(c, p+8, 32)
	require.NoError(t, err)
	u, _ := r.w.Usage(0)
	assert.Equal(t, 1, u.Registrations)
	_, err = d.CommRegister(c, p+40, 32)
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(err), "past the allocation")
	_, err = d.CommRegister(c, p, 0)
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(err), "zero bytes")
	require.NoError(t, d.CommDeregister(c, h))
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(d.CommDeregister(c, h)), "deregister twice")
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(d.CommDeregister(c, 0x99)), "unknown handle")
}

func TestSymmetricWindows(t *testing.T) {
	r := newRig(t, 2)
	mem := make([]gpulib.Ptr, 2)
	for i := range 2 {
		var err error
		mem[i], err = r.d[i].MemAllocNCCL(3 * winAlignment)
		require.NoError(t, err)
	}
	h := make([]gpulib.Handle, 2)
	r.each(t, func(i int) error {
		var err error
		h[i], err = r.d[i].CommWindowRegister(r.c[i], mem[i], winAlignment, gpulib.WinCollSymmetric)
		return err
	})
	plain, _ := r.w.Alloc(0, winAlignment)
	for _, tt := range []struct {
		name  string
		buf   gpulib.Ptr
		bytes uint64
		flags int
	}{
		{"plain cuMemAlloc memory", plain, 16, 0},
		{"symmetric offset not aligned", mem[0] + 16, 16, gpulib.WinCollSymmetric},
		{"already a window", mem[0], 16, 0},
		{"zero bytes", mem[0] + winAlignment, 0, 0},
		{"unknown flags", mem[0] + winAlignment, 16, 8},
	} {
		_, err := r.d[0].CommWindowRegister(r.c[0], tt.buf, tt.bytes, tt.flags)
		assert.Equal(t, gpulib.InvalidArgument, ncclCode(err), tt.name)
	}
	// Symmetric windows at different offsets: the communicator fails on every rank.
	errs := r.try(t, func(i int) error {
		_, err := r.d[i].CommWindowRegister(r.c[i], mem[i]+gpulib.Ptr(winAlignment*(i+1)), 64, gpulib.WinCollSymmetric)
		return err
	})
	for i := range 2 {
		assert.Equal(t, gpulib.InvalidUsage, ncclCode(errs[i]), "rank %d", i)
	}
	require.NoError(t, r.d[0].CommWindowDeregister(r.c[0], h[0]))
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(r.d[0].CommWindowDeregister(r.c[0], h[0])))
}

func TestWithInProgressMakesNonBlockingCallsPoll(t *testing.T) {
	w := newWorld(t, 1, WithInProgress(2))
	d := w.drivers[0]
	id, _ := d.GetUniqueID()
	c, err := d.CommInitRank(1, id, 0, gpulib.Config{})
	require.NoError(t, err)
	p, _ := w.Alloc(0, 4)
	err = d.AllReduce(p, p, 1, gpulib.Int32, gpulib.Sum, c, 0)
	assert.Equal(t, gpulib.InProgress, ncclCode(err))
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(d.AllReduce(p, p, 1, gpulib.Int32, gpulib.Sum, c, 0)),
		"a call before the previous one settled")
	for range 2 {
		res, _ := d.CommGetAsyncError(c)
		assert.Equal(t, gpulib.InProgress, res)
	}
	res, _ := d.CommGetAsyncError(c)
	assert.Equal(t, gpulib.Success, res)
}

func TestEveryDriverCallIsCounted(t *testing.T) {
	w := newWorld(t, 1)
	d := w.drivers[0]
	_, _ = d.MemAlloc(0) // a failing call counts too
	p, _ := d.MemAlloc(8)
	_ = d.MemFree(p)
	_, _ = d.Version()
	assert.Equal(t, int64(2), d.Calls("cuMemAlloc_v2"))
	assert.Equal(t, int64(1), d.Calls("cuMemFree_v2"))
	assert.Equal(t, int64(4), d.TotalCalls())
	assert.Equal(t, int64(4), w.TotalCalls())
	_, _ = w.Alloc(0, 8) // test helpers are not driver calls
	assert.Equal(t, int64(4), w.TotalCalls())
}

func TestCloseEndsBlockedCallsAndGoroutines(t *testing.T) {
	w, err := New(2)
	require.NoError(t, err)
	d := w.drivers[0]
	id, _ := d.GetUniqueID()
	initErr := make(chan error, 1)
	go func() {
		_, err := d.CommInitRank(2, id, 0, gpulib.Config{Blocking: true}) // rank 1 never comes
		initErr <- err
	}()
	f, _ := gate(t, w, 1)
	d1 := w.drivers[1]
	require.NoError(t, d1.LaunchKernel(f, 1, 1, 0, gpulib.KernelArgs{}))
	syncErr := make(chan error, 1)
	go func() { syncErr <- d1.StreamSynchronize(0) }()
	time.Sleep(10 * time.Millisecond)
	require.NoError(t, w.Close())
	within(t, 5*time.Second, func() {
		assert.Error(t, <-initErr)
		assert.Error(t, <-syncErr)
	})
	_, err = d.MemAlloc(8)
	assert.Equal(t, ErrorDeinitialized, cudaCode(err))
	_, err = d.GetUniqueID()
	assert.Equal(t, gpulib.SystemError, ncclCode(err))
	require.NoError(t, w.Close(), "idempotent")
}
