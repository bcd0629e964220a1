package nccl

import (
	"context"
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// NCCL versions of the device API's host calls: the release that introduced the call,
// or, for the calls that pass ncclCommProperties_t or ncclDevCommRequirements_t, the
// first release whose layout of them is raw/nccl's (2.29.2 and 2.29.3 have others).
const (
	versionTeams      = 22803 // ncclTeamWorld, ncclTeamLsa, ncclTeamRail, ncclTeamRankTo*
	versionProperties = 22907 // ncclCommQueryProperties (introduced in 2.29.2)
	versionDevComm    = 22907 // ncclDevCommCreate, ncclDevCommDestroy (introduced in 2.28.3)
	versionDevPointer = 22902 // ncclGet{Lsa,Peer,LsaMultimem}DevicePointer
)

// Names of the device API's operations in errors.
const (
	opDevice        = "device"
	opProperties    = "properties"
	opTeam          = "team"
	opDevCommCreate = "dev-comm-create"
	opDevCommClose  = "dev-comm-close"
	opWindowPointer = "window-pointer"
)

// GINType is the GPU-initiated networking a communicator can use (ncclGinType_t).
type GINType int

// The GIN types.
const (
	GINNone  GINType = GINType(nccl.GinTypeNone)  // no GPU-initiated networking
	GINProxy GINType = GINType(nccl.GinTypeProxy) // through a CPU proxy thread
	GINGDAKI GINType = GINType(nccl.GinTypeGdaki) // GPUDirect Async Kernel-Initiated
)

// String returns the type's name ("none", "proxy", "gdaki").
func (t GINType) String() string {
	switch t {
	case GINNone:
		return "none"
	case GINProxy:
		return "proxy"
	case GINGDAKI:
		return "gdaki"
	}
	return fmt.Sprintf("GINType(%d)", int(t))
}

// Properties describe a communicator and what the machine offers it
// (ncclCommQueryProperties).
type Properties struct {
	Rank, Size int // this rank and the number of ranks
	// CUDADevice and NVMLDevice are the device's CUDA and NVML indices.
	CUDADevice, NVMLDevice int
	// DeviceAPI says whether kernels can use NCCL's device API on this communicator
	// (symmetric memory support): NewDevComm needs it.
	DeviceAPI bool
	// Multimem says whether NVLink SHARP multicast memory is available
	// (DevCommRequirements.LSAMultimem, WindowMultimemPointer).
	Multimem bool
	// GIN and RailedGIN are the GPU-initiated networking across all ranks and across
	// the rails (ranks with the same LSA index).
	GIN, RailedGIN GINType
	// LSATeams is the number of LSA teams (load/store accessible: ranks that reach each
	// other's memory directly, over NVLink); Size/LSATeams ranks each.
	LSATeams int
	// HostRMA says whether one-sided operations can target host memory.
	HostRMA bool
}

// deviceAPI returns the driver's device API, or ErrUnsupported for op when the driver
// lacks it or the loaded NCCL is older than since (saying which version has call).
func (c *Communicator) deviceAPI(op, call string, since int) (gpulib.DeviceAPI, error) {
	da, ok := c.d.(gpulib.DeviceAPI)
	if !ok {
		return nil, &comm.ArgError{Rank: c.rank, HasRank: true, Op: op, Arg: "driver", Value: fmt.Sprintf("%T", c.d), Err: comm.ErrUnsupported,
			Reason: "the driver has no NCCL device API"}
	}
	if c.version < since {
		return nil, unsupported(op, call, since, c.version)
	}
	return da, nil
}

// query makes one local call of the device API on the communicator's bound thread,
// outside any group, on a usable communicator.
func (c *Communicator) query(op string, f func() error) error {
	if err := c.g.OutsideGroup(op); err != nil {
		return err
	}
	return c.enqueue(op, -1, ungroupable, func(ncclOps) error { return c.bound(f) })
}

// Device returns the CUDA device the communicator runs on (ncclCommCuDevice).
func (c *Communicator) Device() (int, error) {
	da, err := c.deviceAPI(opDevice, "ncclCommCuDevice", 0)
	if err != nil {
		return 0, err
	}
	var dev int
	err = c.query(opDevice, func() (err error) {
		dev, err = da.CommCuDevice(c.comm)
		return err
	})
	return dev, err
}

// Properties returns what NCCL says of the communicator and the machine
// (ncclCommQueryProperties, NCCL >= 2.29.7; older ones return ErrUnsupported).
func (c *Communicator) Properties() (Properties, error) {
	da, err := c.deviceAPI(opProperties, "ncclCommQueryProperties", versionProperties)
	if err != nil {
		return Properties{}, err
	}
	var p gpulib.Properties
	err = c.query(opProperties, func() (err error) {
		p, err = da.CommQueryProperties(c.comm)
		return err
	})
	if err != nil {
		return Properties{}, err
	}
	return Properties{Rank: p.Rank, Size: p.NRanks, CUDADevice: p.CudaDev, NVMLDevice: p.NvmlDev,
		DeviceAPI: p.DeviceAPI, Multimem: p.Multimem, GIN: GINType(p.GinType), RailedGIN: GINType(p.RailedGinType),
		LSATeams: p.NLsaTeams, HostRMA: p.HostRMA}, nil
}

// Team is a set of ranks as NCCL's device API sees them (ncclTeam_t): Size ranks
// Stride apart in the communicator, this rank being number Rank of them.
type Team struct {
	Size, Rank, Stride int
}

// TeamWorld returns the team of every rank (ncclTeamWorld, NCCL >= 2.28.3).
func (c *Communicator) TeamWorld() (Team, error) {
	return c.team("ncclTeamWorld", gpulib.DeviceAPI.TeamWorld)
}

// TeamLSA returns this rank's LSA team (ncclTeamLsa, NCCL >= 2.28.3): consecutive
// ranks that reach each other's memory directly, the same number for every rank.
func (c *Communicator) TeamLSA() (Team, error) {
	return c.team("ncclTeamLsa", gpulib.DeviceAPI.TeamLsa)
}

// TeamRail returns this rank's rail (ncclTeamRail, NCCL >= 2.28.3): the ranks with
// this rank's index in every LSA team.
func (c *Communicator) TeamRail() (Team, error) {
	return c.team("ncclTeamRail", gpulib.DeviceAPI.TeamRail)
}

func (c *Communicator) team(call string, f func(gpulib.DeviceAPI, gpulib.Comm) (gpulib.Team, error)) (Team, error) {
	da, err := c.deviceAPI(opTeam, call, versionTeams)
	if err != nil {
		return Team{}, err
	}
	var t gpulib.Team
	err = c.query(opTeam, func() (err error) {
		t, err = f(da, c.comm)
		return err
	})
	return Team{Size: t.NRanks, Rank: t.Rank, Stride: t.Stride}, err
}

// checkTeamRank checks that rank is a member index of t, and t one of this rank's.
func (c *Communicator) checkTeamRank(t Team, rank int) error {
	switch {
	case t.Size < 1 || t.Size > c.world || t.Rank < 0 || t.Rank >= t.Size || t.Stride < 1:
		return &comm.ArgError{Rank: c.rank, HasRank: true, Op: opTeam, Arg: "team", Value: t, Err: comm.ErrInvalidRank,
			Reason: fmt.Sprintf("not a team of a communicator of %d ranks (from TeamWorld, TeamLSA or TeamRail)", c.world)}
	case rank < 0 || rank >= t.Size:
		return &comm.ArgError{Rank: c.rank, HasRank: true, Op: opTeam, Arg: "rank", Value: rank, Err: comm.ErrInvalidRank,
			Reason: fmt.Sprintf("must be in [0, %d), the team's size", t.Size)}
	}
	return nil
}

// TeamRankToWorld returns the communicator rank of rank number rank of team t
// (ncclTeamRankToWorld, NCCL >= 2.28.3).
func (c *Communicator) TeamRankToWorld(t Team, rank int) (int, error) {
	return c.teamRank("ncclTeamRankToWorld", t, rank, gpulib.DeviceAPI.TeamRankToWorld)
}

// TeamRankToLSA returns the LSA team index of rank number rank of team t
// (ncclTeamRankToLsa, NCCL >= 2.28.3).
func (c *Communicator) TeamRankToLSA(t Team, rank int) (int, error) {
	return c.teamRank("ncclTeamRankToLsa", t, rank, gpulib.DeviceAPI.TeamRankToLsa)
}

func (c *Communicator) teamRank(call string, t Team, rank int, f func(gpulib.DeviceAPI, gpulib.Comm, gpulib.Team, int) (int, error)) (int, error) {
	da, err := c.deviceAPI(opTeam, call, versionTeams)
	if err != nil {
		return 0, err
	}
	if err := c.checkTeamRank(t, rank); err != nil {
		return 0, err
	}
	var r int
	err = c.query(opTeam, func() (err error) {
		r, err = f(da, c.comm, gpulib.Team{NRanks: t.Size, Rank: t.Rank, Stride: t.Stride}, rank)
		return err
	})
	return r, err
}

// GINConnection is the GPU-initiated networking a device communicator asks for
// (ncclGinConnectionType_t).
type GINConnection int

// The GIN connections.
const (
	GINConnectionNone GINConnection = GINConnection(nccl.GinConnectionNone) // no GIN
	GINConnectionFull GINConnection = GINConnection(nccl.GinConnectionFull) // every rank to every rank
	GINConnectionRail GINConnection = GINConnection(nccl.GinConnectionRail) // along the rails only
)

// DevCommRequirements are what a device communicator provides kernels
// (ncclDevCommRequirements_t); the zero value asks for none of it. Counts are never
// negative.
type DevCommRequirements struct {
	// LSAMultimem asks for multicast memory on the LSA team (Properties.Multimem).
	LSAMultimem bool
	// LSABarriers is the number of barriers across the LSA team; Barriers the number
	// across all ranks (they need GIN), RailGINBarriers across each rail.
	LSABarriers, Barriers, RailGINBarriers int
	// LSALLA2ABlocks and LSALLA2ASlots size the low-latency all-to-all buffers.
	LSALLA2ABlocks, LSALLA2ASlots int
	// GIN is the GPU-initiated networking to connect; GINContexts (0: NCCL's default,
	// 4), GINSignals and GINCounters what kernels get of it; GINQueueDepth 0 keeps
	// NCCL's default. Signals, counters and all-rank barriers need GIN.
	GIN                                                 GINConnection
	GINContexts, GINSignals, GINCounters, GINQueueDepth int
}

func (r DevCommRequirements) check() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"LSABarriers", r.LSABarriers}, {"Barriers", r.Barriers}, {"RailGINBarriers", r.RailGINBarriers},
		{"LSALLA2ABlocks", r.LSALLA2ABlocks}, {"LSALLA2ASlots", r.LSALLA2ASlots}, {"GINContexts", r.GINContexts},
		{"GINSignals", r.GINSignals}, {"GINCounters", r.GINCounters}, {"GINQueueDepth", r.GINQueueDepth}} {
		if f.v < 0 || f.v > 1<<30 {
			return &comm.ArgError{Op: opDevCommCreate, Arg: f.name, Value: f.v, Err: comm.ErrInvalidSize, Reason: "must be in [0, 2^30]"}
		}
	}
	switch r.GIN {
	case GINConnectionNone, GINConnectionFull, GINConnectionRail:
	default:
		return &comm.ArgError{Op: opDevCommCreate, Arg: "GIN", Value: int(r.GIN), Err: comm.ErrUnsupported,
			Reason: "not GINConnectionNone, GINConnectionFull or GINConnectionRail"}
	}
	return nil
}

// DevComm is a device communicator (ncclDevComm_t): what a kernel written against
// NCCL's device API takes as a parameter to communicate itself. Close it before the
// communicator.
type DevComm struct {
	c *Communicator
	v *gpulib.DevComm
}

// NewDevComm creates a device communicator with the requirements (ncclDevCommCreate,
// NCCL >= 2.29.7; older ones return ErrUnsupported). It is a collective call: every
// rank creates its own with the same requirements, outside any group, and the call
// waits, within ctx and the operation timeout, until NCCL has made it. A communicator
// without device API support (Properties.DeviceAPI false) fails with ncclInvalidUsage;
// requirements the machine cannot meet (multicast, GIN) with ncclInvalidArgument.
func (c *Communicator) NewDevComm(ctx context.Context, req DevCommRequirements) (*DevComm, error) {
	if err := req.check(); err != nil {
		return nil, err
	}
	da, err := c.deviceAPI(opDevCommCreate, "ncclDevCommCreate", versionDevComm)
	if err != nil {
		return nil, err
	}
	if err := c.g.OutsideGroup(opDevCommCreate); err != nil {
		return nil, err
	}
	var v *gpulib.DevComm
	err = c.enqueue(opDevCommCreate, -1, ungroupable, func(ncclOps) error {
		return c.bound(func() (err error) {
			v, err = da.DevCommCreate(c.comm, gpulib.DevCommRequirements{
				LsaMultimem: req.LSAMultimem, BarrierCount: req.Barriers, LsaBarrierCount: req.LSABarriers,
				RailGinBarrierCnt: req.RailGINBarriers, LsaLLA2ABlocks: req.LSALLA2ABlocks, LsaLLA2ASlots: req.LSALLA2ASlots,
				GinContextCount: req.GINContexts, GinSignalCount: req.GINSignals, GinCounterCount: req.GINCounters,
				GinConnectionType: int(req.GIN), GinQueueDepth: req.GINQueueDepth,
			})
			if err == nil || code(err) == gpulib.InProgress { // made once every rank has joined
				err = c.settleHeld(ctx, c.comm, bounded)
			}
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return &DevComm{c: c, v: v}, nil
}

// Bytes returns the device communicator's value as the loaded NCCL made it, in that
// NCCL's layout of struct ncclDevComm (2.29 begins with rank and nRanks, 2.30 with
// magic and version): the bytes a kernel parameter of type ncclDevComm gets, for a
// kernel compiled against the loaded NCCL's headers. It is sizeof(ncclDevComm) of the
// newest header raw/nccl binds (240 bytes, 2.30.7); an older NCCL's struct is a shorter
// prefix. Nil after Close.
func (d *DevComm) Bytes() []byte {
	if d == nil || d.v == nil {
		return nil
	}
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(d.v)), unsafe.Sizeof(*d.v))...)
}

// versionDevCommMagic: struct ncclDevComm begins with magic and version from NCCL 2.30.3
// on (raw/nccl's DevComm); before, with int rank, nRanks; uint32_t nRanks_rcp32; int
// lsaRank, lsaSize (nccl_device/impl/comm__types.h 2.29, gen/snapshot/nccl-2.29.7.txt).
const versionDevCommMagic = 23003

// place reads rank, nRanks, lsaRank and lsaSize from the value, in the layout of the
// loaded NCCL.
func (d *DevComm) place() (rank, size, lsaRank, lsaSize int) {
	v := d.v
	if d.c.version >= versionDevCommMagic {
		return int(v.Rank), int(v.NRanks), int(v.LsaRank), int(v.LsaSize)
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
	i32 := func(off int) int { return int(int32(binary.LittleEndian.Uint32(b[off:]))) }
	return i32(0), i32(4), i32(12), i32(16)
}

// Rank returns the rank and the number of ranks the device communicator holds (what
// kernels read); zero after Close.
func (d *DevComm) Rank() (rank, size int) {
	if d == nil || d.c == nil || d.v == nil {
		return 0, 0
	}
	rank, size, _, _ = d.place()
	return rank, size
}

// LSA returns the LSA index and the LSA team's size the device communicator holds;
// zero after Close.
func (d *DevComm) LSA() (rank, size int) {
	if d == nil || d.c == nil || d.v == nil {
		return 0, 0
	}
	_, _, rank, size = d.place()
	return rank, size
}

// Close destroys the device communicator (ncclDevCommDestroy); no kernel may still use
// it. Closing again, or a zero DevComm, returns ErrClosed.
func (d *DevComm) Close() error {
	if d == nil || d.c == nil || d.v == nil {
		return &comm.ArgError{Op: opDevCommClose, Arg: "dev comm", Value: nil, Err: comm.ErrClosed, Reason: "not made by NewDevComm, or closed"}
	}
	c := d.c
	da, err := c.deviceAPI(opDevCommClose, "ncclDevCommDestroy", versionDevComm)
	if err != nil {
		return err
	}
	if err := c.g.OutsideGroup(opDevCommClose); err != nil {
		return err
	}
	err = c.enqueue(opDevCommClose, -1, cleanup, func(ncclOps) error {
		return c.bound(func() error { return da.DevCommDestroy(c.comm, d.v) })
	})
	if err == nil {
		d.v = nil
	}
	return err
}

// window returns NCCL's window of h, checking offset against its size.
func (b *Backend) window(h WindowHandle, offset int) (gpulib.Handle, error) {
	b.regMu.Lock()
	w, ok := b.userWins.m[h]
	b.regMu.Unlock()
	if !ok {
		return 0, &comm.ArgError{Op: opWindowPointer, Arg: "handle", Value: h, Err: comm.ErrUnknownHandle,
			Reason: "not returned by register-window or already deregistered"}
	}
	if offset < 0 || offset >= w.bytes {
		return 0, &comm.ArgError{Op: opWindowPointer, Arg: "offset", Value: offset, Err: comm.ErrInvalidSize,
			Reason: fmt.Sprintf("must be in [0, %d), the window's size", w.bytes)}
	}
	return w.h, nil
}

// windowPointer makes one window pointer call.
func (b *Backend) windowPointer(h WindowHandle, offset int, call string, f func(gpulib.DeviceAPI, gpulib.Handle) (gpulib.Ptr, error)) (comm.DevicePtr, error) {
	c := b.conn()
	da, err := c.deviceAPI(opWindowPointer, call, versionDevPointer)
	if err != nil {
		return 0, err
	}
	w, err := b.window(h, offset)
	if err != nil {
		return 0, err
	}
	var p gpulib.Ptr
	err = c.query(opWindowPointer, func() (err error) {
		p, err = f(da, w)
		return err
	})
	return comm.DevicePtr(p), err
}

// WindowLSAPointer returns the address at which this rank's kernels reach byte offset
// of the window h of LSA team member lsaRank (ncclGetLsaDevicePointer, NCCL >= 2.29.2).
func (b *Backend) WindowLSAPointer(h WindowHandle, offset, lsaRank int) (comm.DevicePtr, error) {
	if lsaRank < 0 {
		return 0, &comm.ArgError{Op: opWindowPointer, Arg: "lsaRank", Value: lsaRank, Err: comm.ErrInvalidRank, Reason: "must not be negative"}
	}
	return b.windowPointer(h, offset, "ncclGetLsaDevicePointer", func(da gpulib.DeviceAPI, w gpulib.Handle) (gpulib.Ptr, error) {
		return da.GetLsaDevicePointer(w, uint64(offset), lsaRank)
	})
}

// WindowPeerPointer returns the address at which this rank's kernels reach byte offset
// of rank peer's window h (ncclGetPeerDevicePointer, NCCL >= 2.29.2), or 0 when peer is
// not in this rank's LSA team (its memory is not load/store accessible).
func (b *Backend) WindowPeerPointer(h WindowHandle, offset, peer int) (comm.DevicePtr, error) {
	if err := core.CheckRank(opWindowPointer, "peer", peer, b.conn().world); err != nil {
		return 0, err
	}
	return b.windowPointer(h, offset, "ncclGetPeerDevicePointer", func(da gpulib.DeviceAPI, w gpulib.Handle) (gpulib.Ptr, error) {
		return da.GetPeerDevicePointer(w, uint64(offset), peer)
	})
}

// WindowMultimemPointer returns the multicast address of byte offset of window h across
// the LSA team (ncclGetLsaMultimemDevicePointer, NCCL >= 2.29.2), or 0 without
// multicast support (Properties.Multimem).
func (b *Backend) WindowMultimemPointer(h WindowHandle, offset int) (comm.DevicePtr, error) {
	return b.windowPointer(h, offset, "ncclGetLsaMultimemDevicePointer", func(da gpulib.DeviceAPI, w gpulib.Handle) (gpulib.Ptr, error) {
		return da.GetLsaMultimemDevicePointer(w, uint64(offset))
	})
}
