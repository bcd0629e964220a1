package gpulib

import "github.com/ncclgo/ncclgo/raw/nccl"

// DeviceAPI is an optional Driver capability: the host calls of NCCL's device API
// (nccl_device/*.h): the communicator's properties and device, device communicators for
// kernels that communicate themselves, window device pointers and teams. A Driver
// without it makes comm/nccl report them unsupported.
type DeviceAPI interface {
	// CommCuDevice is ncclCommCuDevice: the CUDA device the communicator runs on.
	CommCuDevice(c Comm) (int, error)
	// CommQueryProperties is ncclCommQueryProperties.
	CommQueryProperties(c Comm) (Properties, error)
	// DevCommCreate is ncclDevCommCreate: a collective call, as ncclCommWindowRegister.
	// NCCL may fill the value after the call returns (a non-blocking communicator):
	// it stays where it is, and is read once the communicator is ready.
	DevCommCreate(c Comm, req DevCommRequirements) (*DevComm, error)
	// DevCommDestroy is ncclDevCommDestroy of a value DevCommCreate returned.
	DevCommDestroy(c Comm, dc *DevComm) error
	// GetLsaDevicePointer, GetPeerDevicePointer and GetLsaMultimemDevicePointer are
	// ncclGet{Lsa,Peer,LsaMultimem}DevicePointer of window w (ncclCommWindowRegister's).
	GetLsaDevicePointer(w Handle, offset uint64, lsaRank int) (Ptr, error)
	GetPeerDevicePointer(w Handle, offset uint64, peer int) (Ptr, error)
	GetLsaMultimemDevicePointer(w Handle, offset uint64) (Ptr, error)
	// TeamWorld, TeamLsa and TeamRail are ncclTeamWorld, ncclTeamLsa, ncclTeamRail.
	TeamWorld(c Comm) (Team, error)
	TeamLsa(c Comm) (Team, error)
	TeamRail(c Comm) (Team, error)
	// TeamRankToWorld and TeamRankToLsa are ncclTeamRankToWorld, ncclTeamRankToLsa.
	TeamRankToWorld(c Comm, t Team, rank int) (int, error)
	TeamRankToLsa(c Comm, t Team, rank int) (int, error)
}

// Properties are the fields of ncclCommProperties_t a caller reads.
type Properties struct {
	Rank, NRanks     int
	CudaDev, NvmlDev int
	DeviceAPI        bool // deviceApiSupport
	Multimem         bool // multimemSupport
	GinType          int  // ncclGinType_t: NCCL_GIN_TYPE_NONE, _PROXY, _GDAKI
	RailedGinType    int  // railedGinType
	NLsaTeams        int  // nLsaTeams
	HostRMA          bool // hostRmaSupport
}

// Team is ncclTeam_t: nRanks ranks, this one rank, stride between them in the world.
type Team struct {
	NRanks, Rank, Stride int
}

// DevCommRequirements are the fields of ncclDevCommRequirements_t the caller sets; the
// others keep NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER's values.
type DevCommRequirements struct {
	LsaMultimem       bool
	BarrierCount      int
	LsaBarrierCount   int
	RailGinBarrierCnt int
	LsaLLA2ABlocks    int
	LsaLLA2ASlots     int
	GinForceEnable    bool
	GinContextCount   int // 0 keeps NCCL's default (4)
	GinSignalCount    int
	GinCounterCount   int
	GinConnectionType int
	GinQueueDepth     int
}

// DevComm is ncclDevComm_t as NCCL filled it: the bytes a kernel receives.
type DevComm = nccl.DevComm
