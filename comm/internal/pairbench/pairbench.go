// Package pairbench times two pieces of code against each other in one benchmark run,
// the way comm's benchmarks report ratios: the runs alternate in blocks, so a noisy
// machine (another process, frequency changes) slows both sides alike.
package pairbench

import (
	"slices"
	"time"
)

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

// Blocks calls each of fns with block-sized counts until each has run n times,
// rotating which goes first, and returns every block's time per call of each: per[i][j]
// is the nanoseconds per call of fns[i] in block j. Per-block figures let a benchmark
// take medians (of each side, of their difference, of their ratio), so that a block the
// machine interrupted does not decide the figure.
func Blocks(n, block int, fns ...func(n int)) (per [][]float64) {
	if block < 1 {
		block = 1
	}
	blocks := (n + block - 1) / block
	per = make([][]float64, len(fns))
	for i := range per {
		per[i] = make([]float64, 0, blocks)
	}
	for done, j := 0, 0; done < n; done, j = done+block, j+1 {
		m := min(block, n-done)
		for k := range fns {
			i := (j + k) % len(fns)
			t0 := time.Now()
			fns[i](m)
			per[i] = append(per[i], float64(time.Since(t0).Nanoseconds())/float64(m))
		}
	}
	return per
}

// Median returns the median of v, 0 for none; v is left as it was.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return median(slices.Sorted(slices.Values(v)))
}
