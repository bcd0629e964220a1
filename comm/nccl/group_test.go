package nccl

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// checkingDriver is stubDriver whose Submit checks that a group holds only one
// goroutine's operations: every call of goroutine g has count 8*(g+1), and g records
// g+1 calls per group.
type checkingDriver struct {
	stubDriver
	mu     sync.Mutex
	groups map[uint64]int // count -> groups submitted
	bad    []string
}

func (d *checkingDriver) Submit(calls []gpulib.Call) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(calls) == 0 {
		d.bad = append(d.bad, "an empty group was submitted")
		return 0, nil
	}
	n := calls[0].Count
	for _, c := range calls {
		if c.Count != n {
			d.bad = append(d.bad, fmt.Sprintf("a group mixes counts %d and %d", n, c.Count))
		}
	}
	if want := int(n / 8); len(calls) != want {
		d.bad = append(d.bad, fmt.Sprintf("the group of count %d has %d calls, want %d", n, len(calls), want))
	}
	d.groups[n]++
	return len(calls), nil
}

// TestGroupsOfConcurrentGoroutinesStayApart runs groups on several goroutines at once,
// on one communicator, some nested and some ended while others are open: each group
// submits exactly its own goroutine's calls, a goroutine outside a group is never
// grouped, and once all have ended no group is open.
func TestGroupsOfConcurrentGoroutinesStayApart(t *testing.T) {
	d := &checkingDriver{groups: map[uint64]int{}}
	b := newStubNCCL(t, d)
	const goroutines, rounds = 6, 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	check := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bytes := 8 * (g + 1)
			for r := range rounds {
				if g == 0 { // outside any group: made at once, never submitted as a group
					check(b.SendTo(p, 8, 1, 3))
					runtime.Gosched()
					continue
				}
				nested := r%3 == 0
				check(b.GroupStart())
				if nested {
					check(b.GroupStart())
				}
				for i := range g + 1 {
					if i%2 == 0 {
						check(b.SendTo(p, bytes, 1, 3))
					} else {
						check(b.RecvFrom(p, bytes, 1, 3))
					}
					if i == 0 && nested {
						check(b.GroupEnd()) // the inner level: nothing is submitted yet
					}
				}
				check(b.GroupEnd())
			}
		}()
	}
	wg.Wait()
	require.Empty(t, errs)
	assert.Empty(t, d.bad)
	for g := 1; g < goroutines; g++ {
		assert.Equal(t, rounds, d.groups[uint64(8*(g+1))], "groups of goroutine %d", g)
	}
	assert.Zero(t, d.groups[8], "goroutine 0 had no group")
	assert.Zero(t, groups.open.Load(), "no group is left open")
	assert.Zero(t, b.c.opened.Load())
	assert.Zero(t, b.c.grouped.Load())
	here, elsewhere := groupsOpenedBy(b.c)
	assert.Zero(t, here+elsewhere)
}

// TestGroupOpenedElsewhereIsCounted checks what Close sees of groups its communicator
// opened: the levels on the calling goroutine and on another one, which is not ended.
func TestGroupOpenedElsewhereIsCounted(t *testing.T) {
	b := newStubNCCL(t, stubDriver{})
	opened, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		_ = b.GroupStart()
		_ = b.GroupStart()
		close(opened)
		<-release
		err := b.GroupEnd()
		if err == nil {
			err = b.GroupEnd()
		}
		done <- err
	}()
	<-opened
	here, elsewhere := groupsOpenedBy(b.c)
	assert.Equal(t, [2]int{0, 2}, [2]int{here, elsewhere}, "two levels on the other goroutine")
	require.NoError(t, b.GroupStart())
	require.NoError(t, b.SendTo(p, 8, 1, 3))
	here, elsewhere = groupsOpenedBy(b.c)
	assert.Equal(t, [2]int{1, 2}, [2]int{here, elsewhere}, "and one here")
	assert.Equal(t, 1, groupDepth())
	require.NoError(t, b.GroupEnd())
	assert.Zero(t, groupDepth())
	close(release)
	require.NoError(t, <-done)
	here, elsewhere = groupsOpenedBy(b.c)
	assert.Zero(t, here+elsewhere)
}

// refusingDriver is stubDriver with its own Batch (gpulib.Batcher), which refuses to
// record a receive of refuse bytes and fails the submission at the call fail (succeeds
// with fail < 0).
type refusingDriver struct {
	stubDriver
	refuse uint64
	fail   int
	batch  *refusingBatch
}

func (d *refusingDriver) NewBatch() gpulib.Batch {
	d.batch = &refusingBatch{CallBatch: gpulib.NewBatch(stubDriver{}).(*gpulib.CallBatch), d: d}
	return d.batch
}

type refusingBatch struct {
	*gpulib.CallBatch
	d        *refusingDriver
	recorded []uint64
}

func (b *refusingBatch) Recv(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	if count == b.d.refuse {
		return &gpulib.Error{Code: gpulib.InvalidArgument, Detail: "cannot record"}
	}
	b.recorded = append(b.recorded, count)
	return b.CallBatch.Recv(buf, count, dt, peer, c, s)
}

func (b *refusingBatch) Send(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	b.recorded = append(b.recorded, count)
	return b.CallBatch.Send(buf, count, dt, peer, c, s)
}

func (b *refusingBatch) Submit() (int, error) {
	if b.d.fail < 0 {
		return len(b.recorded), nil
	}
	return b.d.fail, &gpulib.Error{Code: gpulib.InvalidArgument, Detail: "rejected"}
}

// Accepts takes every refusingDriver's groups, as rawdriver's batches do.
func (b *refusingBatch) Accepts(d gpulib.Driver) bool {
	_, ok := d.(*refusingDriver)
	return ok
}

func (b *refusingBatch) Reset() {
	b.recorded = b.recorded[:0]
	b.CallBatch.Reset()
}

// TestGroupRecordsIntoTheDriversBatch checks that a grouped operation records straight
// into its driver's Batch: a call the batch cannot record fails the operation at once
// (and is not part of the group), and GroupEnd names the operation of the recorded call
// the submission reports, counting recorded calls only.
func TestGroupRecordsIntoTheDriversBatch(t *testing.T) {
	d := &refusingDriver{refuse: 24, fail: 2}
	b := newStubNCCL(t, d)
	require.NoError(t, b.GroupStart())
	require.NoError(t, b.SendTo(p, 8, 1, 3))
	err := b.RecvFrom(p, 24, 1, 3)
	require.Error(t, err, "the batch refused the receive")
	var rec *comm.OpError
	require.ErrorAs(t, err, &rec)
	assert.Equal(t, [3]any{core.OpRecv, 24, 1}, [3]any{rec.Op, rec.Bytes, rec.Peer})
	require.NoError(t, b.RecvFrom(p, 16, 1, 3))
	require.NoError(t, b.SendTo(p, 32, 1, 3))
	assert.Equal(t, []uint64{8, 16, 32}, d.batch.recorded, "recorded as the operations were made")
	err = b.GroupEnd()
	require.Error(t, err)
	var outer, op *comm.OpError
	require.ErrorAs(t, err, &outer)
	require.ErrorAs(t, outer.Err, &op)
	assert.Equal(t, [3]any{core.OpSend, 32, 1}, [3]any{op.Op, op.Bytes, op.Peer},
		"the third recorded call is the send of 32 bytes, not the refused receive")
	assert.Contains(t, err.Error(), "rejected")
	assert.Empty(t, d.batch.recorded, "GroupEnd empties the batch for the next group")

	first := d.batch
	d.fail = 0
	require.NoError(t, b.GroupStart())
	require.NoError(t, b.SendTo(p, 8, 1, 3))
	assert.Same(t, first, d.batch, "the next group on this goroutine reuses the batch")
	require.Error(t, b.GroupEnd())
}

// sharingDriver is stubDriver with its own Batch, which takes the groups of every
// sharingDriver (as rawdriver's batches take every raw driver's); made counts the
// batches made.
type sharingDriver struct {
	stubDriver
	made *int
}

func (d *sharingDriver) NewBatch() gpulib.Batch {
	*d.made++
	return sharingBatch{gpulib.NewBatch(stubDriver{}).(*gpulib.CallBatch)}
}

type sharingBatch struct{ *gpulib.CallBatch }

func (sharingBatch) Accepts(d gpulib.Driver) bool {
	_, ok := d.(*sharingDriver)
	return ok
}

// TestGroupsStartingOnOtherCommunicatorsReuseTheBatch checks that groups whose first
// operation alternates between two communicators, each with its own driver whose
// batches serve both (as the raw drivers' do), reuse one batch: nothing is allocated.
func TestGroupsStartingOnOtherCommunicatorsReuseTheBatch(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	made := 0
	b1, b2 := newStubNCCL(t, &sharingDriver{made: &made}), newStubNCCL(t, &sharingDriver{made: &made})
	var first, second *Backend = b1, b2
	group := func() {
		_ = first.GroupStart()
		_ = first.SendTo(p, 8, 1, 3)
		_ = second.RecvFrom(p, 8, 1, 3)
		if err := first.GroupEnd(); err != nil {
			t.Error(err)
		}
		first, second = second, first
	}
	group()
	group()
	assert.Zero(t, testing.AllocsPerRun(100, group))
	assert.Equal(t, 1, made, "one batch took the groups of both drivers")
}

// releaseGroupOf returns a cleanup that frees the group left open by the goroutine with
// key id, which has ended: no goroutine can end it any more, and the process-wide count
// of open groups would keep later tests (-count=N) off the path taken with none open.
func releaseGroupOf(id uint64) func() {
	return func() {
		tg := findGroup(id)
		if tg == nil {
			return
		}
		for _, o := range tg.openers {
			if o != addLevel {
				o.opened.Add(-1)
			}
		}
		clear(tg.openers)
		tg.openers = tg.openers[:0]
		groups.open.Add(-1)
		recycle(tg)
	}
}
