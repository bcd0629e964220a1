package commtest

import (
	"errors"
	"fmt"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest/internal/sim"
	"github.com/ncclgo/ncclgo/comm/nccl"
	rawnccl "github.com/ncclgo/ncclgo/raw/nccl"
)

// SimHarness returns the Harness of comm's NCCL backend on a simulated world of world
// ranks (see NewCluster); opts apply to every Cluster it starts, after the element type.
// Each Start returns a *Cluster. The simulated NCCL is 2.29.7 unless opts say otherwise,
// so the harness requires every capability the suite knows of the NCCL version it
// simulates: registration and symmetric memory from 2.19, split from 2.18, the device
// API from 2.29.7, grow from 2.29.2.
func SimHarness(world int, opts ...Option) Harness {
	cfg := clusterConfig{}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	v := cfg.version
	if v == 0 {
		v = sim.DefaultVersion
	}
	var caps []Capability
	if v >= 22907 {
		caps = append(caps, CapSuspend)
	}
	if v >= 21800 {
		caps = append(caps, CapSplit)
	}
	if v >= 21900 {
		caps = append(caps, CapRegister, CapSymmetricMemory)
	}
	if v >= 22907 {
		caps = append(caps, CapDeviceAPI)
	}
	if v >= 22902 {
		caps = append(caps, CapGrow)
	}
	caps = append(caps, CapWatchdog, CapAsyncErrors)
	return Harness{
		Name:     fmt.Sprintf("simulated NCCL %d, %d ranks", v, world),
		World:    world,
		Requires: caps,
		StartWatched: func(elem comm.DType, timeout time.Duration) (Instance, error) {
			o := append([]Option{WithCommOptions(nccl.WithElementType(elem), nccl.WithTimeout(timeout),
				nccl.WithWatchdog(timeout/10), nccl.WithAbortOnFailure(), nccl.WithCloseTimeout(10*time.Second))}, opts...)
			return NewCluster(world, o...)
		},
		Start: func(elem comm.DType) (Instance, error) {
			o := append([]Option{WithCommOptions(nccl.WithElementType(elem), nccl.WithTimeout(time.Minute),
				nccl.WithCloseTimeout(10*time.Second))}, opts...)
			return NewCluster(world, o...)
		},
	}
}

// SingleHarness returns the Harness of comm.Single (and comm.NoOp for the typed cases),
// with one simulated device for memory. Single moves no data, so the suite checks what a
// no-op one-rank backend must get right: every in-place result (a one-rank collective
// leaves its buffer as it is), AllReduceAsync's stream ordering (the copies around it
// run in order), RecvCommandU32's refusal on the root, registration handles, symmetric
// memory reported as ErrUnsupported, and the whole bad-input table. Out-of-place results
// are not checked: on one rank they would need the copy Single does not make.
func SingleHarness() Harness {
	return Harness{
		Name:  "comm.Single",
		World: 1,
		NoOp:  true,
		Start: func(elem comm.DType) (Instance, error) {
			s, err := comm.NewSingle(comm.WithElementType(elem))
			if err != nil {
				return nil, err
			}
			w, err := sim.New(1)
			if err != nil {
				return nil, err
			}
			return &singleInstance{Cluster: &Cluster{w: w, n: 1}, single: s, noop: comm.NewNoOp()}, nil
		},
	}
}

// singleInstance is a memory-only Cluster with comm.Single and comm.NoOp as rank 0.
type singleInstance struct {
	*Cluster
	single *comm.Single
	noop   *comm.NoOp
}

func (s *singleInstance) Backends() []comm.Backend { return []comm.Backend{s.single} }

// InjectAsyncError returns ErrUnsupported: comm.Single has no library to fail.
func (s *singleInstance) InjectAsyncError(int, rawnccl.Result) error {
	return fmt.Errorf("inject async error: %w: comm.Single calls no library", comm.ErrUnsupported)
}

func (s *singleInstance) Communicators() []comm.Communicator { return []comm.Communicator{s.noop} }

func (s *singleInstance) Close() error {
	var errs []error
	for _, err := range []error{s.single.Close(), s.noop.Close()} {
		if err != nil && !errors.Is(err, comm.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, s.Cluster.Close())...)
}
