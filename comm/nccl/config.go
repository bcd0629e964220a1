package nccl

import (
	"fmt"
	"math"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// WithBlocking makes the communicators blocking (config.blocking = 1): NCCL calls then
// return only once done, and initialisation, Split and Shrink block inside NCCL, where
// ctx, the operation timeout and Close cannot interrupt them. The default (false) is
// comm's non-blocking mode, in which every wait polls ncclCommGetAsyncError.
func WithBlocking(blocking bool) Option {
	return func(c *ncclcfg.Config) { c.Nccl.Blocking = blocking }
}

// WithCGAClusterSize sets config.cgaClusterSize (0 to 8: the CUDA thread block cluster
// size of NCCL's kernels).
func WithCGAClusterSize(n int) Option { return WithConfigField("cgaClusterSize", n) }

// WithCTAs sets config.minCTAs and config.maxCTAs, the number of thread blocks (CTAs)
// NCCL's kernels use; 0 keeps NCCL's default for that bound.
func WithCTAs(minCTAs, maxCTAs int) Option {
	return func(c *ncclcfg.Config) {
		if minCTAs != 0 {
			WithConfigField("minCTAs", minCTAs)(c)
		}
		if maxCTAs != 0 {
			WithConfigField("maxCTAs", maxCTAs)(c)
		}
	}
}

// WithNetName sets config.netName, the network module NCCL uses ("IB", "Socket", or a
// plugin's name).
func WithNetName(name string) Option { return func(c *ncclcfg.Config) { c.Nccl.NetName = name } }

// WithSplitShare sets config.splitShare: communicators made by Split share the
// parent's resources.
func WithSplitShare(share bool) Option {
	v := 0
	if share {
		v = 1
	}
	return WithConfigField("splitShare", v)
}

// WithTrafficClass sets config.trafficClass (NCCL >= 2.26), the network traffic class
// of the communicator's connections.
func WithTrafficClass(class int) Option { return WithConfigField("trafficClass", class) }

// WithConfigField sets any int field of ncclConfig_t by its C name ("nvlsCTAs",
// "CTAPolicy", "collnetEnable", "graphUsageMode", ...): every int field of raw/nccl's
// generated nccl.ConfigFields, which also gives the release that added each.
// A field the loaded NCCL lacks fails the communicator's creation with ErrUnsupported,
// naming the version that added it; an unknown field or a value outside int32 fails it
// with ErrInvalidSize or ErrUnsupported. The last setting of a field wins.
func WithConfigField(name string, value int) Option {
	return func(c *ncclcfg.Config) {
		c.Nccl.Ints = append(c.Nccl.Ints, gpulib.ConfigInt{Name: name, Value: int32(value)})
		if value < math.MinInt32 || value > math.MaxInt32 {
			c.Nccl.Ints[len(c.Nccl.Ints)-1].Name = "" // checkConfig reports it
			c.Nccl.Bad = append(c.Nccl.Bad, fmt.Sprintf("%s = %d", name, value))
		}
	}
}

// configFields are the int fields of ncclConfig_t after size, magic and version, by C
// name, from the generated table.
var configFields = func() map[string]nccl.StructField {
	m := map[string]nccl.StructField{}
	for _, f := range nccl.ConfigFields[3:] {
		if f.Type == "int" {
			m[f.C] = f
		}
	}
	return m
}()

// checkConfig fails for settings the loaded NCCL (version) cannot honour.
func checkConfig(s ncclcfg.Settings, version int) error {
	if len(s.Bad) > 0 {
		return &comm.ArgError{Op: core.OpInit, Arg: "nccl config", Value: s.Bad[0], Err: comm.ErrInvalidSize, Reason: "outside int32"}
	}
	need := func(field string) error {
		for _, f := range nccl.ConfigFields {
			if f.C == field && version < f.SinceCode {
				return unsupported(core.OpInit, "ncclConfig_t."+field, f.SinceCode, version)
			}
		}
		return nil
	}
	for _, f := range s.Ints {
		if _, ok := configFields[f.Name]; !ok {
			return &comm.ArgError{Op: core.OpInit, Arg: "nccl config field", Value: f.Name, Err: comm.ErrUnsupported,
				Reason: "not an int field of ncclConfig_t in this package's header"}
		}
		if err := need(f.Name); err != nil {
			return err
		}
	}
	if s.NetName != "" {
		return need("netName")
	}
	return nil
}

// ncclConfig is what every communicator of c is created with.
func (c *Communicator) ncclConfig() gpulib.Config {
	return gpulib.Config{Blocking: c.cfg.Nccl.Blocking, Name: c.cfg.Name, NetName: c.cfg.Nccl.NetName, Ints: c.cfg.Nccl.Ints}
}

// RawComm returns the underlying NCCL communicator (ncclComm_t) for calls comm does
// not wrap, such as the device API's window and signal calls. It is borrowed: comm
// owns it, so never destroy, finalize, abort or revoke it; it changes on
// AttemptReconnect and Shrink and is invalid after Close. Calls made with it bypass
// comm's locking, groups and health tracking. On the simulator it is the simulator's
// handle, not a real ncclComm_t.
func (c *Communicator) RawComm() (nccl.Comm, error) {
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable("raw-comm", -1); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return nccl.Comm(c.comm), nil
}
