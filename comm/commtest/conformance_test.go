package commtest_test

import (
	"fmt"
	"testing"

	"github.com/ncclgo/ncclgo/comm/commtest"
)

func TestConformanceSingle(t *testing.T) {
	commtest.RunConformance(t, commtest.SingleHarness())
}

func TestConformanceSimulatedNCCL(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 8} {
		t.Run(fmt.Sprint("world", n), func(t *testing.T) {
			commtest.RunConformance(t, commtest.SimHarness(n))
		})
	}
}

// The backend's polling paths: every communication call returns ncclInProgress first.
func TestConformanceSimulatedNCCLInProgress(t *testing.T) {
	commtest.RunConformance(t, commtest.SimHarness(2, commtest.WithInProgress(3)))
}

// Older libraries: 2.22 has ncclMemAlloc but no windows (symmetric memory without a
// window); 2.19 is the oldest with ncclMemAlloc and ncclCommRegister; 2.18 has neither
// (registration and symmetric memory say ErrUnsupported).
func TestConformanceSimulatedOlderNCCL(t *testing.T) {
	for _, v := range []int{22203, 21903, 21803} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			commtest.RunConformance(t, commtest.SimHarness(3, commtest.WithNCCLVersion(v)))
		})
	}
}
