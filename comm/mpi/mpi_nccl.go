package mpi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/raw/mpi"
)

// Bring-up of an NCCL job over MPI, as nccl-tests does it: the processes mpirun (or srun
// with PMIx) started already know their ranks, so no rendezvous store is needed. Rank 0
// creates the NCCL unique id, MPI_Bcast gives it to every rank, and MPI tells each rank
// its local rank on the node (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED), which picks
// its device.

// NCCLBootstrap is what an MPI job knows before it creates its NCCL communicator.
type NCCLBootstrap struct {
	// ID is the NCCL unique id rank 0 created, the same on every rank.
	ID comm.UniqueID
	// Rank and World are the MPI communicator's.
	Rank, World int
	// LocalRank and LocalWorld are this rank's index and the number of ranks on its
	// node (MPI_COMM_TYPE_SHARED).
	LocalRank, LocalWorld int
}

// Fingerprint is a short hex digest of the id, for logs (the id itself is a secret of
// the job: whoever has it can join).
func (b NCCLBootstrap) Fingerprint() string {
	s := sha256.Sum256(b.ID[:])
	return hex.EncodeToString(s[:6])
}

// mpiIDMessage is what rank 0 broadcasts: a status byte, the id, and on failure the
// error text.
type mpiIDMessage struct {
	ok  byte
	id  comm.UniqueID
	msg [255]byte
}

// BootstrapNCCL does the MPI side of an NCCL bring-up, collectively: rank 0 creates the
// NCCL unique id (ncclGetUniqueId, which needs no device), MPI_Bcast shares it, MPI gives
// the local rank, and a barrier makes sure every rank holds the id before it returns. If
// rank 0 cannot create the id, every rank gets an error saying why. Like the other
// collectives it blocks until every rank called it.
func (c *Communicator) BootstrapNCCL(ctx context.Context) (NCCLBootstrap, error) {
	b := NCCLBootstrap{Rank: c.rank, World: c.world}
	if err := c.g.OutsideGroup(core.OpInit); err != nil {
		return b, err
	}
	var m mpiIDMessage
	if c.rank == 0 {
		id, err := nccl.NewUniqueID()
		if err == nil {
			m.ok, m.id = 1, id
		} else {
			copy(m.msg[:], err.Error())
		}
	}
	if err := c.lock(core.OpInit); err != nil {
		return b, err
	}
	err := mpi.Bcast(unsafe.Pointer(&m), int32(unsafe.Sizeof(m)), c.p.types[comm.Uint8], 0, c.comm)
	var local mpi.Comm
	info, errInfo := mpi.InfoNull()
	if err == nil {
		err = errInfo
	}
	if err == nil {
		err = mpi.CommSplitType(c.comm, mpi.CommTypeShared, int32(c.rank), info, &local)
	}
	if err == nil {
		var lr, ls int32
		err = errors.Join(mpi.CommRank(local, &lr), mpi.CommSize(local, &ls))
		b.LocalRank, b.LocalWorld = int(lr), int(ls)
		if errFree := mpi.CommFree(&local); err == nil {
			err = errFree
		}
	}
	c.mu.Unlock()
	if err != nil {
		return b, c.opErr(core.OpInit, -1, fmt.Errorf("exchange the nccl unique id over mpi: %w", err))
	}
	if m.ok == 0 {
		n := 0
		for n < len(m.msg) && m.msg[n] != 0 {
			n++
		}
		return b, &comm.OpError{Op: core.OpInit, Bytes: -1, Rank: c.rank,
			Err: fmt.Errorf("rank 0 could not create the nccl unique id: %s", m.msg[:n])}
	}
	b.ID = m.id
	if err := c.Barrier(ctx); err != nil {
		return b, err
	}
	return b, nil
}

// NewNCCL brings up the NCCL Backend of this MPI job without a rendezvous store:
// BootstrapNCCL, then the device of the local rank (WithDevice overrides it) is opened
// and the NCCL communicator created with the MPI rank and world size. Every rank must
// call it. Options are NewNCCL's (WithElementType, WithDevice, WithTimeout, ...); the
// logger (WithLogger) records the exchange and the device opening.
func (c *Communicator) NewNCCL(ctx context.Context, opts ...nccl.Option) (*nccl.Backend, error) {
	cfg := ncclcfg.New(opts)
	if err := core.CheckWorld(core.OpInit, c.rank, c.world, cfg.Elem, "nccl.WithElementType"); err != nil {
		return nil, err
	}
	b, err := c.BootstrapNCCL(ctx)
	if err != nil {
		return nil, err
	}
	dev := ncclcfg.JobDevice(cfg, b.LocalRank)
	cfg.Log.Info("comm: nccl unique id exchanged over mpi", "rank", b.Rank, "world", b.World,
		"local_rank", b.LocalRank, "local_world", b.LocalWorld, "device", dev, "id", b.Fingerprint())
	d, err := ncclcfg.DriverFor(cfg, dev, b.Rank)
	if err != nil {
		return nil, &comm.OpError{Op: core.OpInit, Bytes: -1, Rank: b.Rank,
			Err: fmt.Errorf("open device %d (local rank %d): %w", dev, b.LocalRank, err)}
	}
	cfg.Log.Info("comm: device opened", "rank", b.Rank, "device", dev)
	return nccl.New(ctx, b.ID, b.Rank, b.World, ncclcfg.Use(cfg, d))
}
