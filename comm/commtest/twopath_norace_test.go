//go:build !race

package commtest_test

// twoRankRace scales the two-rank bit-for-bit sweep down under the race detector,
// which slows the simulator's arithmetic tenfold without adding checks that the
// smaller sizes do not already make.
const twoRankRace = false
