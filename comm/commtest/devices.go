package commtest

import (
	"fmt"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest/internal/sim"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// NewDevices starts a simulated machine of n devices with no backends, for code that
// brings up its own through comm's bring-up (job.Connect, job.JoinJob): pass
// DeviceOption(rank) and the rank's backend runs on simulated device rank, its unique
// id made by the simulated NCCL. The device helpers (Alloc, Write, Read, streams) and
// the faults (Kill, Revive, InjectAsyncError, Hang, Delay, FailCall) work as on a
// NewCluster; Backends is empty and WithCommOptions is ignored. Close the backends
// before the Cluster: Close stops the simulation under them.
func NewDevices(n int, opts ...Option) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("new devices: %d devices: need at least 1: %w", n, comm.ErrInvalidSize)
	}
	cfg := clusterConfig{}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	w, err := sim.New(n, cfg.sim...)
	if err != nil {
		return nil, fmt.Errorf("new devices: %w", err)
	}
	return &Cluster{w: w, n: n, cfg: cfg}, nil
}

// DeviceOption returns the nccl.Option that makes job.Connect, job.JoinJob and
// job.Job.NewNCCL use simulated device rank instead of a GPU. Every rank of such a
// job must use a device of this Cluster: the unique id is the simulated NCCL's.
func (c *Cluster) DeviceOption(rank int) (nccl.Option, error) {
	if err := c.checkRank("device option", rank); err != nil {
		return nil, err
	}
	d, err := c.w.Driver(rank)
	if err != nil {
		return nil, err
	}
	return ncclcfg.WithDriver(d), nil
}

// Revive brings a killed device back the way a restarted process finds it: empty (its
// memory, streams and communicators are gone) and working. Replace does this for
// NewCluster's backends; with NewDevices, Revive and then bring the rank up again.
func (c *Cluster) Revive(rank int) error {
	if err := c.checkRank("revive", rank); err != nil {
		return err
	}
	return c.w.Revive(rank)
}

// DevicesOption returns the nccl.Option that makes nccl.NewAll use the Cluster's
// simulated devices by ordinal (device d is simulated device d) instead of GPUs.
func (c *Cluster) DevicesOption() nccl.Option {
	return func(cfg *ncclcfg.Config) {
		cfg.DriverOf = func(device int) (gpulib.Driver, error) {
			if err := c.checkRank("devices option", device); err != nil {
				return nil, err
			}
			return c.w.Driver(device)
		}
	}
}
