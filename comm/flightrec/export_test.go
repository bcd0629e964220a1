package flightrec

import "testing"

// For the tests of package flightrec_test (hangs produced through the NCCL backend on
// the simulator, which imports this package).

// Hang is hang for flightrec_test.
type Hang = hang

// NewHang makes a Hang: build writes the dumps into dir; the verdict on communicator
// group (of global ranks) must be problem, naming culprit and operation op.
func NewHang(name string, build func(t testing.TB, dir string), problem Problem, group string, ranks []int, culprit int, op string) Hang {
	return hang{name: name, build: build, problem: problem, group: group, ranks: ranks, culprit: culprit, op: op, noDump: problem == NoDump}
}

// AgreeOnHang is agreeOnHang.
func AgreeOnHang(t *testing.T, h Hang) { agreeOnHang(t, h) }

// HangName is h's name.
func HangName(h Hang) string { return h.name }
