package main

import (
	"math"
	"testing"
)

// idleSlopes separates what each client costs from what a bring-up costs once: a
// server that grows by a fixed 1,500 KiB plus 0.9 KiB per client is read as such, and
// one round far off does not move the figure (medians).
func TestIdleSlopesSeparateTheFixedCost(t *testing.T) {
	counts := []int{1024, 2048, 4096}
	grown := make([][]idleFig, len(counts))
	for i, n := range counts {
		g := 1500 + 0.9*float64(n)
		grown[i] = []idleFig{{g, g - 100}, {g + 5, g - 95}, {g * 3, g * 3}}
	}
	got := idleSlopes(counts, grown)
	if len(got) != 2 {
		t.Fatalf("got %d slopes, want 2 (one per pair of consecutive counts)", len(got))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 0.01 }
	for _, s := range got {
		if !near(s.rss, 0.9) || !near(s.anon, 0.9) {
			t.Errorf("%d → %d: %.3f KiB per added client (anonymous %.3f), want 0.9", s.from, s.to, s.rss, s.anon)
		}
		if want := 1505.0 / float64(s.from); !near(s.fixed, want) {
			t.Errorf("%d → %d: fixed part %.3f KiB per client, want %.3f", s.from, s.to, s.fixed, want)
		}
	}
	if got := idleSlopes([]int{1024}, grown[:1]); len(got) != 0 {
		t.Errorf("one count gave %d slopes, want none", len(got))
	}
}

func TestMedianFig(t *testing.T) {
	if got := medianFig([]idleFig{{3, 1}, {1, 2}, {2, 9}}); got != (idleFig{2, 2}) {
		t.Errorf("odd: got %+v, want {2 2}", got)
	}
	if got := medianFig([]idleFig{{4, 1}, {1, 3}}); got != (idleFig{2.5, 2}) {
		t.Errorf("even: got %+v, want {2.5 2}", got)
	}
}

// perAdded gives the full report's figure per added client: 1,024 clients at 2.5 KiB
// each and 4,096 at 1.0 each (a fixed cost spread over fewer or more clients) is half
// a KiB for each client past the first 1,024; a count not measured gives no figure.
func TestPerAddedTakesOutTheFixedCost(t *testing.T) {
	if got := perAdded(1024, 2.5, 4096, 1.0); math.Abs(got-0.5) > 1e-9 {
		t.Errorf("got %v KiB per added client, want 0.5", got)
	}
	for _, c := range []struct {
		a, b       int
		kibA, kibB float64
	}{{1024, 4096, -1, 1}, {1024, 4096, 1, timedOut}, {4096, 1024, 1, 1}, {1024, 1024, 1, 1}} {
		if got := perAdded(c.a, c.kibA, c.b, c.kibB); got >= 0 {
			t.Errorf("perAdded(%d, %v, %d, %v) = %v, want no figure (negative)", c.a, c.kibA, c.b, c.kibB, got)
		}
	}
}
