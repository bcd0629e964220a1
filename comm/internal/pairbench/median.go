package pairbench

import (
	"slices"
	"time"
)

// Medians is what AlternateMedian measured: the median over the rounds of each side's
// time per call, and the median of the per-round ratios A/B.
type Medians struct {
	// A and B are the medians of the per-call times of the rounds.
	A, B time.Duration
	// Ratio is the median over the rounds of A's time divided by B's time in that round.
	Ratio float64
	// Rounds is the number of rounds measured.
	Rounds int
}

// AlternateMedian runs rounds rounds; each round calls a and b once each with n calls,
// alternating which goes first, and sync (when not nil) before every block and outside
// the timing, so that the processes of a distributed benchmark start each block
// together. It returns the medians over the rounds: a noisy machine disturbs some rounds,
// and the median keeps the undisturbed ones. Each side runs rounds*n calls in all.
func AlternateMedian(rounds, n int, sync func(), a, b func(n int)) Medians {
	rounds, n = max(rounds, 1), max(n, 1)
	ta := make([]time.Duration, rounds)
	tb := make([]time.Duration, rounds)
	block := func(f func(int)) time.Duration {
		if sync != nil {
			sync()
		}
		t0 := time.Now()
		f(n)
		return time.Since(t0)
	}
	for i := range rounds {
		if i%2 == 0 {
			ta[i] = block(a)
			tb[i] = block(b)
		} else {
			tb[i] = block(b)
			ta[i] = block(a)
		}
	}
	return summarize(ta, tb, n)
}

// summarize gives the medians of per-round block times ta and tb of n calls each.
func summarize(ta, tb []time.Duration, n int) Medians {
	ratio := make([]float64, len(ta))
	for i := range ta {
		ratio[i] = float64(ta[i]) / float64(max(tb[i], 1))
	}
	ta, tb = slices.Clone(ta), slices.Clone(tb)
	slices.Sort(ta)
	slices.Sort(tb)
	slices.Sort(ratio)
	return Medians{A: median(ta) / time.Duration(n), B: median(tb) / time.Duration(n), Ratio: median(ratio), Rounds: len(ta)}
}

// median returns the middle of sorted s (the mean of the middle two for an even
// count); s must not be empty.
func median[T time.Duration | float64](s []T) T {
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
