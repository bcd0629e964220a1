//go:build cgo

package nccl

import (
	"runtime"
	"slices"
	"strconv"
	"testing"

	"github.com/ncclgo/ncclgo/comm/flightrec"
)

// BenchmarkFlightRecorderCost is the flight recorder's cost per operation: the same
// calls over stubDriver (which calls nothing, so comm's work alone) on a backend with
// the recorder on (flightrec.DefaultEntries) and one with it off, alternating in
// blocks of 64 in the same run. on-minus-off-ns/op is the recorder's cost (the
// target, for a recorder on by default, is at most 10 ns), on/off the same-run ratio;
// on-allocs/op must be 0. AllReduce is Backend.AllReduce (its written-out
// path); AllReduce,comms=2 the same with a second communicator registered in the
// recorder (as after a Split: record ids then take an atomic addition); Broadcast is
// Backend.Broadcast (enqueue's blocking path); group=N is a GroupStart, N sends and
// receives, GroupEnd, per operation.
func BenchmarkFlightRecorderCost(b *testing.B) {
	type path struct {
		name  string
		ops   int
		comms int // communicators registered in the recorder that is on
		run   func(nb *Backend)
	}
	paths := []path{
		{"AllReduce", 1, 1, func(nb *Backend) { _ = nb.AllReduce(p, 4096) }},
		{"AllReduce,comms=2", 1, 2, func(nb *Backend) { _ = nb.AllReduce(p, 4096) }},
		{"Broadcast", 1, 1, func(nb *Backend) { _ = nb.Broadcast(p, 4096, 0) }},
	}
	for _, n := range []int{1, 8, 64} {
		paths = append(paths, path{"group=" + strconv.Itoa(n), n, 1, func(nb *Backend) { commP2PGroup(nb, n) }})
	}
	for _, pt := range paths {
		b.Run(pt.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			on, off := newStubNCCLRec(b, flightrec.DefaultEntries), newStubNCCLRec(b, 0)
			if on.FlightRecorder() == nil || off.FlightRecorder() != nil {
				b.Fatal("recorder not on (or not off) as configured")
			}
			for i := 1; i < pt.comms; i++ {
				if _, err := on.FlightRecorder().Comm(flightrec.Group{Name: "other" + strconv.Itoa(i), Ranks: []int{0}}); err != nil {
					b.Fatal(err)
				}
			}
			runOn, runOff := func() { pt.run(on) }, func() { pt.run(off) }
			runOn()
			runOff()
			allocs := testing.AllocsPerRun(100, runOn)
			b.ResetTimer()
			per := alternate3(b.N, 64, [3]func(int){
				repeat(runOn), repeat(runOff), repeat(runOn),
			})
			b.StopTimer()
			k := float64(pt.ops)
			onNs := median(append(slices.Clone(per[0]), per[2]...)) / k
			offNs := median(slices.Clone(per[1])) / k
			b.ReportMetric(onNs, "on-ns/op")
			b.ReportMetric(offNs, "off-ns/op")
			b.ReportMetric(onNs-offNs, "on-minus-off-ns/op")
			b.ReportMetric(onNs/offNs, "on/off")
			b.ReportMetric(allocs/k, "on-allocs/op")
		})
	}
}

func repeat(f func()) func(int) {
	return func(n int) {
		for range n {
			f()
		}
	}
}
