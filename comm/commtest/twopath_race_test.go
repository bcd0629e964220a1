//go:build race

package commtest_test

const twoRankRace = true
