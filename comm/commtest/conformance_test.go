package commtest_test

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/internal/testenv"
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

// The NCCL backend's two-rank send/recv + add all-reduce path: 2-rank clusters whose
// backends have the add kernel of their element type (bf16, fp16 and fp32 take the
// path; the other types keep ncclAllReduce), also with ncclInProgress answers and with
// NCCL 2.18, which has no ncclCommRegister for the scratch buffer.
func TestConformanceSimulatedNCCLTwoRankPath(t *testing.T) {
	for name, opts := range map[string][]commtest.Option{
		"default":     nil,
		"in-progress": {commtest.WithInProgress(3)},
		"nccl-2.18":   {commtest.WithNCCLVersion(21803)},
	} {
		t.Run(name, func(t *testing.T) {
			commtest.RunConformance(t, twoRankHarness(opts...))
		})
	}
}

// twoRankHarness is SimHarness(2, opts...) with the add kernel set on every backend
// whose element type has one.
func twoRankHarness(opts ...commtest.Option) commtest.Harness {
	h := commtest.SimHarness(2, opts...)
	h.Name += ", two-rank add path"
	start := h.Start
	h.Start = func(elem comm.DType) (commtest.Instance, error) {
		inst, err := start(elem)
		if err != nil {
			return nil, err
		}
		c, ok := inst.(*commtest.Cluster)
		if !ok {
			_ = inst.Close()
			return nil, fmt.Errorf("simulated harness started a %T, want *commtest.Cluster", inst)
		}
		if elem != comm.BFloat16 && elem != comm.Float16 && elem != comm.Float32 {
			return c, nil
		}
		for r := range c.Size() {
			k, err := c.AddKernel(r, elem)
			if err == nil {
				var b *nccl.Backend
				if b, err = c.NCCL(r); err == nil {
					err = b.SetAddKernel(k)
				}
			}
			if err != nil {
				_ = c.Close()
				return nil, fmt.Errorf("rank %d: set add kernel: %w", r, err)
			}
		}
		return c, nil
	}
	return h
}

// TestRequiredCapabilityCannotSkip checks that a harness's Requires turns "every rank
// said ErrUnsupported" into a failure: a simulated NCCL 2.18 has no ncclCommRegister,
// and a harness that claims registration must fail the suite, not skip the case. The
// suite runs in a child process (a failing RunConformance fails its test).
func TestRequiredCapabilityCannotSkip(t *testing.T) {
	if os.Getenv("NCCLGO_CONFORMANCE_CHILD") == "1" {
		h := commtest.SimHarness(2, commtest.WithNCCLVersion(21803))
		h.Requires = []commtest.Capability{commtest.CapRegister}
		commtest.RunConformance(t, h)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRequiredCapabilityCannotSkip$", "-test.count=1", "-test.v")
	cmd.Env = append(testenv.Environ(), "NCCLGO_CONFORMANCE_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the suite must fail; output:\n%s", out)
	require.Contains(t, string(out), "the harness requires register-buffer, but every rank answered ErrUnsupported")
	require.Contains(t, string(out), "symmetric-memory is unsupported by this backend", "a capability not required still skips")
}
