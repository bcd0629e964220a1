package rawdriver

import (
	"runtime"
	"sync"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

var _ gpulib.DeviceAPI = (*Driver)(nil)

// structVersion is the version code written into the version field of NCCL's versioned
// structs (ncclCommProperties_t, ncclDevCommRequirements_t): the loaded library's, at
// most the generated header's. NCCL refuses a version newer than its own, and reads the
// struct with the layout of the version given; from 2.29.4 on these structs only grow at
// their end, so raw/nccl's layout serves every such version.
func structVersion() uint32 {
	v, err := nccl.LoadedVersion()
	if err != nil || v > nccl.VersionCode {
		v = nccl.VersionCode
	}
	return uint32(v)
}

// CommCuDevice is ncclCommCuDevice.
func (d *Driver) CommCuDevice(c gpulib.Comm) (int, error) {
	var dev int32
	err := nccl.CommCuDevice(nccl.Comm(c), &dev)
	return int(dev), ncclErr(err)
}

// CommQueryProperties is ncclCommQueryProperties, its argument set up as
// NCCL_COMM_PROPERTIES_INITIALIZER does.
func (d *Driver) CommQueryProperties(c gpulib.Comm) (gpulib.Properties, error) {
	p := nccl.CommProperties{Size: uint64(unsafe.Sizeof(nccl.CommProperties{})), Magic: nccl.ApiMagic, Version: structVersion()}
	if err := nccl.CommQueryProperties(nccl.Comm(c), &p); err != nil {
		return gpulib.Properties{}, ncclErr(err)
	}
	return gpulib.Properties{
		Rank: int(p.Rank), NRanks: int(p.NRanks), CudaDev: int(p.CudaDev), NvmlDev: int(p.NvmlDev),
		DeviceAPI: p.DeviceApiSupport, Multimem: p.MultimemSupport, GinType: int(p.GinType),
		RailedGinType: int(p.RailedGinType), NLsaTeams: int(p.NLsaTeams), HostRMA: p.HostRmaSupport,
	}, nil
}

// devComms pins each value DevCommCreate handed NCCL until DevCommDestroy: NCCL may fill
// it after the call returns (a non-blocking communicator completes it later).
var devComms sync.Map // *nccl.DevComm -> *runtime.Pinner

// DevCommCreate is ncclDevCommCreate, its requirements set up as
// NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER does and then as req says.
func (d *Driver) DevCommCreate(c gpulib.Comm, req gpulib.DevCommRequirements) (*gpulib.DevComm, error) {
	r := nccl.DevCommRequirements{
		Size: uint64(unsafe.Sizeof(nccl.DevCommRequirements{})), Magic: nccl.ApiMagic, Version: structVersion(),
		LsaMultimem: req.LsaMultimem, BarrierCount: int32(req.BarrierCount), LsaBarrierCount: int32(req.LsaBarrierCount),
		RailGinBarrierCount: int32(req.RailGinBarrierCnt), LsaLLA2ABlockCount: int32(req.LsaLLA2ABlocks),
		LsaLLA2ASlotCount: int32(req.LsaLLA2ASlots), GinForceEnable: req.GinForceEnable, GinContextCount: 4,
		GinSignalCount: int32(req.GinSignalCount), GinCounterCount: int32(req.GinCounterCount),
		GinConnectionType: nccl.GinConnectionType(req.GinConnectionType), GinQueueDepth: int32(req.GinQueueDepth),
	}
	if req.GinContextCount > 0 {
		r.GinContextCount = int32(req.GinContextCount)
	}
	dc := new(nccl.DevComm)
	pin := new(runtime.Pinner)
	pin.Pin(dc)
	if err := nccl.DevCommCreate(nccl.Comm(c), &r, dc); err != nil {
		pin.Unpin()
		return nil, ncclErr(err)
	}
	devComms.Store(dc, pin)
	return dc, nil
}

// DevCommDestroy is ncclDevCommDestroy; it unpins the value.
func (d *Driver) DevCommDestroy(c gpulib.Comm, dc *gpulib.DevComm) error {
	err := ncclErr(nccl.DevCommDestroy(nccl.Comm(c), dc))
	if err == nil {
		if pin, ok := devComms.LoadAndDelete(dc); ok {
			pin.(*runtime.Pinner).Unpin()
		}
	}
	return err
}

// GetLsaDevicePointer is ncclGetLsaDevicePointer.
func (d *Driver) GetLsaDevicePointer(w gpulib.Handle, offset uint64, lsaRank int) (gpulib.Ptr, error) {
	var p unsafe.Pointer
	err := nccl.GetLsaDevicePointer(nccl.Window(w), offset, int32(lsaRank), &p)
	return gpulib.Ptr(uintptr(p)), ncclErr(err)
}

// GetPeerDevicePointer is ncclGetPeerDevicePointer.
func (d *Driver) GetPeerDevicePointer(w gpulib.Handle, offset uint64, peer int) (gpulib.Ptr, error) {
	var p unsafe.Pointer
	err := nccl.GetPeerDevicePointer(nccl.Window(w), offset, int32(peer), &p)
	return gpulib.Ptr(uintptr(p)), ncclErr(err)
}

// GetLsaMultimemDevicePointer is ncclGetLsaMultimemDevicePointer.
func (d *Driver) GetLsaMultimemDevicePointer(w gpulib.Handle, offset uint64) (gpulib.Ptr, error) {
	var p unsafe.Pointer
	err := nccl.GetLsaMultimemDevicePointer(nccl.Window(w), offset, &p)
	return gpulib.Ptr(uintptr(p)), ncclErr(err)
}

func team(t nccl.Team) gpulib.Team {
	return gpulib.Team{NRanks: int(t.NRanks), Rank: int(t.Rank), Stride: int(t.Stride)}
}

// TeamWorld is ncclTeamWorld.
func (d *Driver) TeamWorld(c gpulib.Comm) (gpulib.Team, error) {
	t, err := nccl.TeamWorld(nccl.Comm(c))
	return team(t), err
}

// TeamLsa is ncclTeamLsa.
func (d *Driver) TeamLsa(c gpulib.Comm) (gpulib.Team, error) {
	t, err := nccl.TeamLsa(nccl.Comm(c))
	return team(t), err
}

// TeamRail is ncclTeamRail.
func (d *Driver) TeamRail(c gpulib.Comm) (gpulib.Team, error) {
	t, err := nccl.TeamRail(nccl.Comm(c))
	return team(t), err
}

// TeamRankToWorld is ncclTeamRankToWorld.
func (d *Driver) TeamRankToWorld(c gpulib.Comm, t gpulib.Team, rank int) (int, error) {
	r, err := nccl.TeamRankToWorld(nccl.Comm(c), nccl.Team{NRanks: int32(t.NRanks), Rank: int32(t.Rank), Stride: int32(t.Stride)}, int32(rank))
	return int(r), err
}

// TeamRankToLsa is ncclTeamRankToLsa.
func (d *Driver) TeamRankToLsa(c gpulib.Comm, t gpulib.Team, rank int) (int, error) {
	r, err := nccl.TeamRankToLsa(nccl.Comm(c), nccl.Team{NRanks: int32(t.NRanks), Rank: int32(t.Rank), Stride: int32(t.Stride)}, int32(rank))
	return int(r), err
}
