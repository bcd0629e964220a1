package sim

import (
	"encoding/binary"
	"sort"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// NCCL versions that introduced the device API's host calls (the first header declaring
// each). comm/nccl asks for 2.29.7 before it passes ncclCommProperties_t or
// ncclDevCommRequirements_t (their 2.29.2 layouts differ from raw/nccl's).
const (
	sinceTeams      = 22803 // ncclTeamWorld, ncclTeamLsa, ncclTeamRail, ncclTeamRankTo*
	sinceProperties = 22902 // ncclCommQueryProperties
	sinceDevComm    = 22803 // ncclDevCommCreate/Destroy
	sinceDevPointer = 22902 // ncclGet{Lsa,Peer,LsaMultimem}DevicePointer

	// sinceDevCommMagic: struct ncclDevComm begins with magic and version from 2.30.3
	// on (nccl_device/impl/comm__types.h); before, with rank and nRanks.
	sinceDevCommMagic = 23003
)

var _ gpulib.DeviceAPI = (*Driver)(nil)

// GIN types (ncclGinType_t) and connection types (ncclGinConnectionType_t).
const (
	GinTypeNone  = int(nccl.GinTypeNone)
	GinTypeProxy = int(nccl.GinTypeProxy)
	GinTypeGDAKI = int(nccl.GinTypeGdaki)

	ginConnNone = int(nccl.GinConnectionNone)
	ginConnFull = int(nccl.GinConnectionFull)
	ginConnRail = int(nccl.GinConnectionRail)
)

// Machine describes the simulated machine the device API reports: which devices share
// a node (an NVLink domain, NCCL's LSA: load/store accessible), and what the fabric
// offers. The zero value is one node holding every device, with the device API (NCCL's
// symmetric memory support) and nothing else.
type Machine struct {
	// GPUsPerNode is how many consecutive devices form a node; 0 puts every device on
	// one node.
	GPUsPerNode int
	// NoDeviceAPI makes communicators lack symmetric memory support
	// (deviceApiSupport false): ncclDevCommCreate then fails with ncclInvalidUsage.
	NoDeviceAPI bool
	// Multimem is NVLink SHARP multicast support (multimemSupport, nvlsSupport).
	Multimem bool
	// GinType is the GPU-initiated networking the network offers (GinTypeNone,
	// GinTypeProxy, GinTypeGDAKI); GinRailOnly says it connects only rails.
	GinType     int
	GinRailOnly bool
	// HostRMA is hostRmaSupport.
	HostRMA bool
}

// WithMachine sets the machine the device API describes (default: the zero Machine).
func WithMachine(m Machine) Option { return func(w *World) { w.machine = m } }

// node is the node of device dev.
func (m Machine) node(dev int) int {
	if m.GPUsPerNode <= 0 {
		return 0
	}
	return dev / m.GPUsPerNode
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// lsaLocked is NCCL's LSA team of rc (ncclDevrInitOnce): the largest size that divides
// every run of consecutive ranks on one node, so that every LSA team is the same number
// of consecutive ranks on one node. Caller holds World.mu.
func (w *World) lsaLocked(rc *rankComm) (size, self int) {
	size, run := 0, 1
	for r := 1; r < len(rc.cl.ranks); r++ {
		if w.machine.node(rc.cl.ranks[r].dev.idx) == w.machine.node(rc.cl.ranks[r-1].dev.idx) {
			run++
		} else {
			size, run = gcd(size, run), 1
		}
	}
	size = gcd(size, run)
	return size, rc.rank % size
}

// readyCommLocked is CommCheck and ncclCommEnsureReady of c. Caller holds World.mu.
func (w *World) readyCommLocked(d *device, c gpulib.Comm, call string) (*rankComm, error) {
	rc, err := w.commLocked(d, c, call)
	if err != nil {
		return nil, err
	}
	if rc.cl == nil {
		return nil, ncclErr(gpulib.InvalidArgument, call, "communicator %#x still initialising", uintptr(c))
	}
	return rc, rc.readyLocked(call)
}

// CommCuDevice is ncclCommCuDevice: the device the communicator was created on.
func (d *Driver) CommCuDevice(c gpulib.Comm) (int, error) {
	const call = "ncclCommCuDevice"
	return locked(d, call, 0, func(w *World) (int, error) {
		rc, err := w.commLocked(d.dev, c, call)
		if err != nil {
			return 0, err
		}
		return rc.dev.idx, nil
	})
}

// CommQueryProperties is ncclCommQueryProperties: the communicator's rank, size and
// device, and what the machine offers it.
func (d *Driver) CommQueryProperties(c gpulib.Comm) (gpulib.Properties, error) {
	const call = "ncclCommQueryProperties"
	return locked(d, call, sinceProperties, func(w *World) (gpulib.Properties, error) {
		rc, err := w.readyCommLocked(d.dev, c, call)
		if err != nil {
			return gpulib.Properties{}, err
		}
		m := w.machine
		lsa, _ := w.lsaLocked(rc)
		p := gpulib.Properties{
			Rank: rc.rank, NRanks: rc.cl.n, CudaDev: rc.dev.idx, NvmlDev: rc.dev.idx,
			DeviceAPI: !m.NoDeviceAPI, Multimem: m.Multimem, HostRMA: m.HostRMA,
			GinType: m.GinType, NLsaTeams: rc.cl.n / lsa,
		}
		if m.GinRailOnly {
			p.GinType, p.RailedGinType = GinTypeNone, m.GinType
		} else {
			p.RailedGinType = m.GinType
		}
		return p, nil
	})
}

// DevCommCreate is ncclDevCommCreate, a collective call: it checks the requirements the
// way NCCL does, and once every rank has called it, fills each rank's device
// communicator (rank and LSA fields, in the layout of the simulated version). A
// non-blocking communicator returns ncclInProgress until then.
func (d *Driver) DevCommCreate(c gpulib.Comm, req gpulib.DevCommRequirements) (*gpulib.DevComm, error) {
	const call = "ncclDevCommCreate"
	var (
		rc       *rankComm
		cl       *clique
		g        *gather
		complete bool
	)
	dc, err := locked(d, call, sinceDevComm, func(w *World) (*gpulib.DevComm, error) {
		var err error
		if rc, err = w.devCommCheckLocked(d.dev, c, req, call); err != nil {
			return nil, err
		}
		lsa, self := w.lsaLocked(rc)
		dc := new(gpulib.DevComm)
		if w.version >= sinceDevCommMagic {
			*dc = gpulib.DevComm{
				Magic: nccl.ApiMagic, Version: uint32(w.version),
				Rank: int32(rc.rank), NRanks: int32(rc.cl.n), LsaRank: int32(self), LsaSize: int32(lsa),
			}
		} else {
			// NCCL 2.29's struct ncclDevComm: int rank, nRanks; uint32_t nRanks_rcp32;
			// int lsaRank, lsaSize; ... (the GIN fields are further on; the simulator
			// leaves them zero).
			b := unsafe.Slice((*byte)(unsafe.Pointer(dc)), unsafe.Sizeof(*dc))
			for i, v := range []int{rc.rank, rc.cl.n, 0, self, lsa} {
				binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
			}
		}
		if rc.devComms == nil {
			rc.devComms = map[*gpulib.DevComm]bool{}
		}
		rc.devComms[dc] = true
		cl = rc.cl
		seq := rc.devSeq
		rc.devSeq++
		var ok bool
		if g, ok = cl.devs[seq]; !ok {
			g = newGather(cl.n, "")
			cl.devs[seq] = g
		}
		g.entries[rc.rank] = !rc.blocking
		if !rc.blocking {
			rc.busy++
		}
		complete = len(g.entries) == g.need
		if complete {
			for r, nonblocking := range g.entries {
				if nonblocking.(bool) {
					cl.ranks[r].busy--
				}
			}
			close(g.done)
			delete(cl.devs, seq)
		}
		return dc, nil
	})
	if err != nil {
		return nil, err
	}
	if !rc.blocking {
		if !complete {
			return dc, inProgress(call, "waiting for the other ranks")
		}
		return dc, nil
	}
	w := d.w
	if err := w.waitDone(rc, cl, g.done, call); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if cl.err != gpulib.Success {
		return nil, ncclErr(cl.err, call, "%s", cl.errDetail)
	}
	return dc, nil
}

// devCommCheckLocked is ncclDevCommCreate's checks of the communicator and the
// requirements (dev_runtime.cc). Caller holds World.mu.
func (w *World) devCommCheckLocked(dev *device, c gpulib.Comm, req gpulib.DevCommRequirements, call string) (*rankComm, error) {
	rc, err := w.commLocked(dev, c, call)
	if err != nil {
		return nil, err
	}
	m := w.machine
	if m.NoDeviceAPI {
		return nil, ncclErr(gpulib.InvalidUsage, call, "communicator does not support symmetric memory")
	}
	if _, err := w.readyCommLocked(dev, c, call); err != nil {
		return nil, err
	}
	conn := req.GinConnectionType
	if req.GinForceEnable {
		conn = ginConnFull
	}
	ginResources := req.GinSignalCount > 0 || req.GinCounterCount > 0 || req.RailGinBarrierCnt > 0 || req.BarrierCount > 0
	switch {
	case ginResources && conn == ginConnNone:
		return nil, ncclErr(gpulib.InvalidArgument, call, "requested GIN resources but did not request GIN to be enabled")
	case conn != ginConnNone && m.GinType == GinTypeNone:
		return nil, ncclErr(gpulib.InvalidArgument, call, "requested GIN but not all ranks in the communicator support GIN")
	case conn == ginConnFull && m.GinRailOnly:
		return nil, ncclErr(gpulib.InvalidArgument, call, "requested GIN connection type NCCL_GIN_CONNECTION_FULL but the communicator supports only NCCL_GIN_CONNECTION_RAIL")
	case req.LsaMultimem && !m.Multimem:
		return nil, ncclErr(gpulib.InvalidArgument, call, "multicast support requested for team but none available on system")
	}
	return rc, nil
}

// DevCommDestroy is ncclDevCommDestroy.
func (d *Driver) DevCommDestroy(c gpulib.Comm, dc *gpulib.DevComm) error {
	const call = "ncclDevCommDestroy"
	_, err := locked(d, call, sinceDevComm, func(w *World) (struct{}, error) {
		rc, err := w.commLocked(d.dev, c, call)
		if err != nil {
			return struct{}{}, err
		}
		if dc == nil {
			return struct{}{}, ncclErr(gpulib.InvalidArgument, call, "devComm argument is NULL")
		}
		delete(rc.devComms, dc)
		return struct{}{}, nil
	})
	return err
}

// windowLocked finds window h among every communicator's windows: the communicator
// and the window's index in its registration order (the same on every rank). Caller
// holds World.mu.
func (w *World) windowLocked(h gpulib.Handle, call string) (*rankComm, int, error) {
	for _, rc := range w.comms {
		if _, ok := rc.wins[h]; ok {
			hs := rc.windowOrder()
			return rc, sort.Search(len(hs), func(i int) bool { return hs[i] >= h }), nil
		}
	}
	return nil, 0, ncclErr(gpulib.InvalidArgument, call, "could not find communicator matching window %#x", uintptr(h))
}

// windowOrder returns rc's windows in registration order (handles grow).
func (rc *rankComm) windowOrder() []gpulib.Handle {
	hs := make([]gpulib.Handle, 0, len(rc.wins))
	for h := range rc.wins {
		hs = append(hs, h)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i] < hs[j] })
	return hs
}

// peerWindowLocked is the address of offset in the window of world rank peer that
// matches rc's window number k. Caller holds World.mu.
func (w *World) peerWindowLocked(rc *rankComm, k, peer int, offset uint64) gpulib.Ptr {
	prc := rc.cl.ranks[peer]
	if prc == nil {
		return 0
	}
	hs := prc.windowOrder()
	if k >= len(hs) {
		return 0
	}
	return prc.wins[hs[k]].buf + gpulib.Ptr(offset)
}

// GetLsaDevicePointer is ncclGetLsaDevicePointer: offset in the window of the LSA
// team's rank lsaRank (in the simulator, that device's address of the byte).
func (d *Driver) GetLsaDevicePointer(h gpulib.Handle, offset uint64, lsaRank int) (gpulib.Ptr, error) {
	const call = "ncclGetLsaDevicePointer"
	return locked(d, call, sinceDevPointer, func(w *World) (gpulib.Ptr, error) {
		rc, k, err := w.windowLocked(h, call)
		if err != nil {
			return 0, err
		}
		lsa, self := w.lsaLocked(rc)
		if lsaRank < 0 || lsaRank >= lsa {
			return 0, ncclErr(gpulib.InvalidArgument, call, "lsaRank %d is not in the valid lsaSize of [0,%d] for window %#x", lsaRank, lsa, uintptr(h))
		}
		return w.peerWindowLocked(rc, k, rc.rank+lsaRank-self, offset), nil
	})
}

// GetPeerDevicePointer is ncclGetPeerDevicePointer: offset in world rank peer's window,
// or 0 (NULL) when peer is outside the caller's LSA team.
func (d *Driver) GetPeerDevicePointer(h gpulib.Handle, offset uint64, peer int) (gpulib.Ptr, error) {
	const call = "ncclGetPeerDevicePointer"
	return locked(d, call, sinceDevPointer, func(w *World) (gpulib.Ptr, error) {
		rc, k, err := w.windowLocked(h, call)
		if err != nil {
			return 0, err
		}
		if peer < 0 || peer >= rc.cl.n {
			return 0, ncclErr(gpulib.InvalidArgument, call, "peer %d is not within valid range of ranks %d", peer, rc.cl.n)
		}
		lsa, self := w.lsaLocked(rc)
		if l := self + peer - rc.rank; l < 0 || l >= lsa {
			return 0, nil
		}
		return w.peerWindowLocked(rc, k, peer, offset), nil
	})
}

// GetLsaMultimemDevicePointer is ncclGetLsaMultimemDevicePointer: 0 (NULL) without
// multimem support. The simulator has no multicast memory: with Machine.Multimem it
// gives the caller's own address of the byte.
func (d *Driver) GetLsaMultimemDevicePointer(h gpulib.Handle, offset uint64) (gpulib.Ptr, error) {
	const call = "ncclGetLsaMultimemDevicePointer"
	return locked(d, call, sinceDevPointer, func(w *World) (gpulib.Ptr, error) {
		rc, _, err := w.windowLocked(h, call)
		if err != nil {
			return 0, err
		}
		if !w.machine.Multimem {
			return 0, nil
		}
		return rc.wins[h].buf + gpulib.Ptr(offset), nil
	})
}

// team computes a team of c as NCCL does (nccl_device/core.cc).
func (d *Driver) team(c gpulib.Comm, call string, f func(rc *rankComm, lsa, self int) gpulib.Team) (gpulib.Team, error) {
	return locked(d, call, sinceTeams, func(w *World) (gpulib.Team, error) {
		rc, err := w.readyCommLocked(d.dev, c, call)
		if err != nil {
			return gpulib.Team{}, err
		}
		lsa, self := w.lsaLocked(rc)
		return f(rc, lsa, self), nil
	})
}

// TeamWorld is ncclTeamWorld: every rank, stride 1.
func (d *Driver) TeamWorld(c gpulib.Comm) (gpulib.Team, error) {
	return d.team(c, "ncclTeamWorld", func(rc *rankComm, _, _ int) gpulib.Team {
		return gpulib.Team{NRanks: rc.cl.n, Rank: rc.rank, Stride: 1}
	})
}

// TeamLsa is ncclTeamLsa: the ranks of the caller's LSA team, stride 1.
func (d *Driver) TeamLsa(c gpulib.Comm) (gpulib.Team, error) {
	return d.team(c, "ncclTeamLsa", func(_ *rankComm, lsa, self int) gpulib.Team {
		return gpulib.Team{NRanks: lsa, Rank: self, Stride: 1}
	})
}

// TeamRail is ncclTeamRail: the ranks with the caller's LSA index, one per LSA team.
func (d *Driver) TeamRail(c gpulib.Comm) (gpulib.Team, error) {
	return d.team(c, "ncclTeamRail", func(rc *rankComm, lsa, _ int) gpulib.Team {
		return gpulib.Team{NRanks: rc.cl.n / lsa, Rank: rc.rank / lsa, Stride: lsa}
	})
}

// TeamRankToWorld is ncclTeamRankToWorld: the world rank of rank in team t.
func (d *Driver) TeamRankToWorld(c gpulib.Comm, t gpulib.Team, rank int) (int, error) {
	var out int
	_, err := d.team(c, "ncclTeamRankToWorld", func(rc *rankComm, _, _ int) gpulib.Team {
		out = rc.rank + (rank-t.Rank)*t.Stride
		return t
	})
	return out, err
}

// TeamRankToLsa is ncclTeamRankToLsa: the LSA rank of rank in team t.
func (d *Driver) TeamRankToLsa(c gpulib.Comm, t gpulib.Team, rank int) (int, error) {
	var out int
	_, err := d.team(c, "ncclTeamRankToLsa", func(_ *rankComm, _, self int) gpulib.Team {
		out = self + (rank-t.Rank)*t.Stride
		return t
	})
	return out, err
}
