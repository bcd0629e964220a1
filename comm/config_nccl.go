package comm

import (
	"fmt"
	"math"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// ncclSettings are the ncclConfig_t fields set by options, applied to every
// communicator the backend creates (initialisation, reconnect, Split, Shrink).
type ncclSettings struct {
	blocking bool
	netName  string
	ints     []gpulib.ConfigInt
	bad      []string // settings outside int32, reported by checkConfig
}

// WithBlocking makes the communicators blocking (config.blocking = 1): NCCL calls then
// return only once done, and initialisation, Split and Shrink block inside NCCL, where
// ctx, the operation timeout and Close cannot interrupt them. The default (false) is
// comm's non-blocking mode, in which every wait polls ncclCommGetAsyncError.
func WithBlocking(blocking bool) Option {
	return func(c *config) { c.nccl.blocking = blocking }
}

// WithCGAClusterSize sets config.cgaClusterSize (0 to 8: the CUDA thread block cluster
// size of NCCL's kernels).
func WithCGAClusterSize(n int) Option { return WithConfigField("cgaClusterSize", n) }

// WithCTAs sets config.minCTAs and config.maxCTAs, the number of thread blocks (CTAs)
// NCCL's kernels use; 0 keeps NCCL's default for that bound.
func WithCTAs(minCTAs, maxCTAs int) Option {
	return func(c *config) {
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
func WithNetName(name string) Option { return func(c *config) { c.nccl.netName = name } }

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
	return func(c *config) {
		c.nccl.ints = append(c.nccl.ints, gpulib.ConfigInt{Name: name, Value: int32(value)})
		if value < math.MinInt32 || value > math.MaxInt32 {
			c.nccl.ints[len(c.nccl.ints)-1].Name = "" // checkConfig reports it
			c.nccl.bad = append(c.nccl.bad, fmt.Sprintf("%s = %d", name, value))
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
func checkConfig(s ncclSettings, version int) error {
	if len(s.bad) > 0 {
		return &ArgError{Op: opInit, Arg: "nccl config", Value: s.bad[0], Err: ErrInvalidSize, Reason: "outside int32"}
	}
	need := func(field string) error {
		for _, f := range nccl.ConfigFields {
			if f.C == field && version < f.SinceCode {
				return unsupported(opInit, "ncclConfig_t."+field, f.SinceCode, version)
			}
		}
		return nil
	}
	for _, f := range s.ints {
		if _, ok := configFields[f.Name]; !ok {
			return &ArgError{Op: opInit, Arg: "nccl config field", Value: f.Name, Err: ErrUnsupported,
				Reason: "not an int field of ncclConfig_t in this package's header"}
		}
		if err := need(f.Name); err != nil {
			return err
		}
	}
	if s.netName != "" {
		return need("netName")
	}
	return nil
}

// ncclConfig is what every communicator of c is created with.
func (c *NCCLCommunicator) ncclConfig() gpulib.Config {
	return gpulib.Config{Blocking: c.cfg.nccl.blocking, Name: c.cfg.name, NetName: c.cfg.nccl.netName, Ints: c.cfg.nccl.ints}
}

// RawComm returns the underlying NCCL communicator (ncclComm_t) for calls comm does
// not wrap, such as the device API's window and signal calls. It is borrowed: comm
// owns it, so never destroy, finalize, abort or revoke it; it changes on
// AttemptReconnect and Shrink and is invalid after Close. Calls made with it bypass
// comm's locking, groups and health tracking. On the simulator it is the simulator's
// handle, not a real ncclComm_t.
func (c *NCCLCommunicator) RawComm() (nccl.Comm, error) {
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable("raw-comm", -1); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return nccl.Comm(c.comm), nil
}
