package mpi

import (
	"runtime"
	"runtime/metrics"
	"time"
)

// Contention: while other goroutines wait for a P, a goroutine returning from a long
// blocking cgo call finds its P taken (Go's sysmon hands it over after 20 µs) and joins
// the global run queue behind every runnable goroutine, and a goroutine that yields
// (runtime.Gosched) joins it too: with 64 CPU-bound goroutines, a scheduling slice of
// 10 ms for each of them, per call. So the communicator watches whether goroutines are
// waiting for a P (c.contended: runnableGoroutines when it would yield, and after each
// call made on the progress thread; the waits' naps say it too), and while they are, it
// neither yields nor makes blocking calls itself: a progress thread of the
// communicator (progress_cgo.go) makes each one, all its rounds outside Go's scheduler,
// and the goroutine waits on a timer, which wakes it ahead of the run queues. Sync,
// Barrier and Close hand it their MPI_Testall polling the same way (waitOffloaded). That
// costs at most one scheduling slice per nap whatever the number of rounds
// (BenchmarkMPIBusyLoop compares it with C); without contention, the calls are
// made directly, as before.

var runnableSample = []metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}

// runnableGoroutines is the number of goroutines waiting for a P (approximate: Go reads
// the run queues without stopping them).
func runnableGoroutines() uint64 {
	s := [1]metrics.Sample{runnableSample[0]}
	metrics.Read(s[:])
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// lockedNap sleeps for d on the goroutine's own OS thread. A goroutine woken by its timer
// runs next on its P but in what is left of the scheduling slice it took over, which
// under contention is nothing: Go's sysmon preempts it within microseconds and it joins
// the global run queue, behind every runnable goroutine. A goroutine locked to its
// thread is resumed on that thread with a slice of its own (runtime.schedule runs a
// locked goroutine without inheriting the slice), which lasts until its next wait. It
// costs two thread handoffs per nap, which only contention repays.
func lockedNap(d time.Duration) {
	runtime.LockOSThread()
	time.Sleep(d)
	runtime.UnlockOSThread()
}
