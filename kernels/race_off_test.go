//go:build !race

package kernels

// raceEnabled scales the random-sample tests down under the race detector,
// which slows the pure arithmetic loops tenfold without adding any checks.
const raceEnabled = false
