package mpi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/raw/mpi"
	rawnccl "github.com/ncclgo/ncclgo/raw/nccl"
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

// mpiIDMessage is what rank 0 broadcasts first: a status byte, on failure the index
// of the sentinel its error matches in relayedSentinels (0: none) and the length of
// the error text that a second broadcast carries, and the id.
type mpiIDMessage struct {
	ok   byte
	kind byte
	n    uint32
	id   comm.UniqueID
}

// relayedSentinels are the errors of rank 0's failure that the other ranks' errors
// match too (errors.Is), by their index in this list.
var relayedSentinels = []error{nil, rawnccl.ErrLibraryNotFound, rawnccl.ErrSymbolNotFound, rawnccl.ErrNeedsCgo}

// relayedError is rank 0's error as another rank sees it: its whole text, and the
// sentinel it matched.
type relayedError struct {
	msg string
	is  error
}

func (e *relayedError) Error() string { return e.msg }
func (e *relayedError) Unwrap() error { return e.is }

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
	var idErr error
	var text []byte
	if c.rank == 0 {
		id, err := nccl.NewUniqueID()
		if err == nil {
			m.ok, m.id = 1, id
		} else {
			idErr, text = err, []byte(err.Error())
			m.n = uint32(min(len(text), math.MaxInt32))
			for i, s := range relayedSentinels {
				if s != nil && errors.Is(err, s) {
					m.kind = byte(i)
					break
				}
			}
		}
	}
	if err := c.lock(core.OpInit); err != nil {
		return b, err
	}
	err := mpi.Bcast(unsafe.Pointer(&m), int32(unsafe.Sizeof(m)), c.p.types[comm.Uint8], 0, c.comm)
	if err == nil && m.ok == 0 && m.n > 0 {
		if c.rank != 0 {
			text = make([]byte, m.n)
		}
		err = mpi.Bcast(unsafe.Pointer(&text[0]), int32(m.n), c.p.types[comm.Uint8], 0, c.comm)
	}
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
		if idErr == nil {
			var is error
			if int(m.kind) < len(relayedSentinels) {
				is = relayedSentinels[m.kind]
			}
			idErr = &relayedError{msg: string(text), is: is}
		}
		return b, &comm.OpError{Op: core.OpInit, Bytes: -1, Rank: c.rank, GlobalRank: c.rank,
			Err: fmt.Errorf("rank 0 could not create the nccl unique id: %w", idErr)}
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
		return nil, &comm.OpError{Op: core.OpInit, Bytes: -1, Rank: b.Rank, GlobalRank: b.Rank,
			Err: fmt.Errorf("open device %d (local rank %d): %w", dev, b.LocalRank, err)}
	}
	cfg.Log.Info("comm: device opened", "rank", b.Rank, "device", dev)
	return nccl.New(ctx, b.ID, b.Rank, b.World, ncclcfg.Use(cfg, d))
}
