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
