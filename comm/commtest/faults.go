package commtest

import (
	"time"

	"github.com/ncclgo/ncclgo/comm/commtest/internal/sim"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// Fault injection and counters.

// Kill makes rank's device die: its queued and future work never runs (so its peers'
// collectives never complete), every library call of its backend fails, and its calls
// blocked in the library return with an error.
func (c *Cluster) Kill(rank int) error {
	if err := c.checkRank("kill", rank); err != nil {
		return err
	}
	return c.w.Kill(rank)
}

// InjectAsyncError makes every communicator of rank report code from
// ncclCommGetAsyncError and fail new calls with it, as NCCL does after a transport
// failure (typically nccl.RemoteError or nccl.SystemError).
func (c *Cluster) InjectAsyncError(rank int, code nccl.Result) error {
	if err := c.checkRank("inject async error", rank); err != nil {
		return err
	}
	return c.w.InjectError(rank, gpulib.Result(code))
}

// Hang makes the next ops NCCL operations that start on rank never complete: they and
// their peers' matching operations wait until the communicator is aborted, revoked or
// destroyed, or the cluster closes.
func (c *Cluster) Hang(rank, ops int) error {
	if err := c.checkRank("hang", rank); err != nil {
		return err
	}
	return c.w.Hang(rank, ops)
}

// Delay makes every NCCL operation on rank wait d before it starts (a slow rank); 0
// removes the delay.
func (c *Cluster) Delay(rank int, d time.Duration) error {
	if err := c.checkRank("delay", rank); err != nil {
		return err
	}
	return c.w.Delay(rank, d)
}

// FailCall makes the next times calls of the library function call (its C name, e.g.
// "cuMemAlloc_v2", "ncclCommInitRankConfig", "ncclAllReduce") by rank's backend fail
// without effect: NCCL functions with ncclSystemError, CUDA functions with a plain
// error. Both wrap an error that errors.Is matches with ErrInjected.
func (c *Cluster) FailCall(rank int, call string, times int) error {
	if err := c.checkRank("fail call", rank); err != nil {
		return err
	}
	return c.w.FailCall(rank, call, nil, times)
}

// ErrInjected is wrapped by the errors FailCall injects.
var ErrInjected = sim.ErrInjected

// DriverCalls returns the number of CUDA and NCCL calls the backends have made so far,
// failed ones included. The cluster's own helpers (Alloc, Write, NewStream, ...) do not
// count.
func (c *Cluster) DriverCalls() int64 { return c.w.TotalCalls() }

// Usage describes what a rank's device holds, for leak checks.
type Usage struct {
	Bytes         uint64 // device memory in use
	Allocations   int    // live cuMemAlloc allocations (Alloc's included)
	NCCLAllocs    int    // live ncclMemAlloc allocations
	Streams       int    // streams not destroyed (NewStream's included)
	Events        int    // events not destroyed
	Comms         int    // communicators neither destroyed nor aborted
	Registrations int    // ncclCommRegister registrations on live communicators
	Windows       int    // NCCL windows on live communicators
}

// Usage returns what rank's device holds now.
func (c *Cluster) Usage(rank int) (Usage, error) {
	if err := c.checkRank("usage", rank); err != nil {
		return Usage{}, err
	}
	u, err := c.w.Usage(rank)
	return Usage(u), err
}
