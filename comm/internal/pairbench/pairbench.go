// Package pairbench times two pieces of code against each other in one benchmark run,
// the way comm's benchmarks report ratios: the runs alternate in blocks, so a noisy
// machine (another process, frequency changes) slows both sides alike.
package pairbench

import "time"

// Alternate calls a and b with block-sized counts until each has run n times,
// alternating which goes first, and returns the time each took in total.
func Alternate(n, block int, a, b func(n int)) (ta, tb time.Duration) {
	if block < 1 {
		block = 1
	}
	for done, i := 0, 0; done < n; done, i = done+block, i+1 {
		m := min(block, n-done)
		first, second := a, b
		if i%2 == 1 {
			first, second = b, a
		}
		t0 := time.Now()
		first(m)
		t1 := time.Now()
		second(m)
		t2 := time.Now()
		if i%2 == 0 {
			ta, tb = ta+t1.Sub(t0), tb+t2.Sub(t1)
		} else {
			tb, ta = tb+t1.Sub(t0), ta+t2.Sub(t1)
		}
	}
	return ta, tb
}

// Repeat turns f into the counted form Alternate takes.
func Repeat(f func()) func(n int) {
	return func(n int) {
		for range n {
			f()
		}
	}
}
