package gpulib

import "github.com/ncclgo/ncclgo/raw/nccl"

// Suspend flags and memory statistics of NCCL 2.29.7 (ncclCommSuspend, ncclCommMemStats).
const (
	// SuspendMem is NCCL_SUSPEND_MEM: release the communicator's dynamic GPU memory.
	SuspendMem = nccl.SuspendMem
	// StatMemSuspendable is ncclStatGpuMemSuspend: bytes a Suspend can release.
	StatMemSuspendable = int(nccl.StatGpuMemSuspend)
	// StatMemSuspended is ncclStatGpuMemSuspended: 1 while suspended, else 0.
	StatMemSuspended = int(nccl.StatGpuMemSuspended)
	// StatMemPersistent is ncclStatGpuMemPersist: bytes a Suspend keeps.
	StatMemPersistent = int(nccl.StatGpuMemPersist)
	// StatMemTotal is ncclStatGpuMemTotal: every byte NCCL tracks for the communicator.
	StatMemTotal = int(nccl.StatGpuMemTotal)
)

// Elastic is an optional Driver capability: growing a communicator (ncclCommGetUniqueId,
// ncclCommGrow; NCCL >= 2.29.2) and suspending its memory (ncclCommSuspend,
// ncclCommResume, ncclCommMemStats; NCCL >= 2.29.7). A Driver without it makes Grow,
// Suspend, Resume and MemStats report unsupported.
type Elastic interface {
	// CommGetUniqueID is ncclCommGetUniqueId: the id of c's next Grow, made by one
	// existing rank (the root) and given to the newcomers.
	CommGetUniqueID(c Comm) (UniqueID, error)
	// CommGrow is ncclCommGrow. Existing ranks pass c and rank -1, the root with id,
	// the others with id nil; newcomers pass c 0, id and their rank in the grown
	// communicator of nranks.
	CommGrow(c Comm, nranks int, id *UniqueID, rank int, cfg Config) (Comm, error)
	// CommSuspend is ncclCommSuspend with flags (SuspendMem).
	CommSuspend(c Comm, flags int) error
	// CommResume is ncclCommResume.
	CommResume(c Comm) error
	// CommMemStats is ncclCommMemStats for one of the Stat* values.
	CommMemStats(c Comm, stat int) (uint64, error)
}
