package core

import (
	"runtime"
	"time"
)

// Pause backs off between two polls of a short wait (i counts the polls): the first
// ones only yield the processor (device work, or a lock's holder, often finishes
// within microseconds), later ones sleep, longer each time, up to max.
func Pause(i int, max time.Duration) {
	const spins = 64
	if i < spins {
		runtime.Gosched()
		return
	}
	d := time.Microsecond << min((i-spins)/8, 20)
	if d > max {
		d = max
	}
	time.Sleep(d)
}
