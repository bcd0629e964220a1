package gpulib

import "reflect"

// CommInfo is an optional Driver capability: ncclCommCount and ncclCommUserRank. comm
// needs it to learn a child communicator's rank and size after CommSplit or CommShrink;
// a Driver without it makes Split and Shrink report unsupported.
type CommInfo interface {
	// CommCount is ncclCommCount: the number of ranks in c.
	CommCount(c Comm) (int, error)
	// CommUserRank is ncclCommUserRank: the calling rank's index in c.
	CommUserRank(c Comm) (int, error)
}

// HostCopier is an optional Driver capability: copies between host and device memory
// ordered on a stream (cuMemcpyHtoDAsync_v2, cuMemcpyDtoHAsync_v2). The flight
// recorder needs it to learn the members of a Split's child; a Driver without it
// leaves split children unrecorded.
type HostCopier interface {
	// MemcpyHtoDAsync copies src to dst on stream s. src is read before it returns
	// (CUDA stages pageable memory): the caller may reuse it at once.
	MemcpyHtoDAsync(dst Ptr, src []byte, s Stream) error
	// MemcpyDtoHAsync copies len(dst) bytes at src into dst on stream s. dst holds
	// them once s has been synchronized past the copy; the caller keeps it alive and
	// untouched until then.
	MemcpyDtoHAsync(dst []byte, src Ptr, s Stream) error
}

// Library is the optional capability of a Driver that names the NCCL library (or
// simulated machine) its calls go to: one group launches calls of one library only,
// so a group refuses a member whose driver names another. Drivers without it are
// told apart by their Go type.
type Library interface {
	Library() any
}

// SameLibrary reports whether the calls of a and b can be launched in one group.
func SameLibrary(a, b Driver) bool {
	la, okA := a.(Library)
	lb, okB := b.(Library)
	if okA && okB {
		return la.Library() == lb.Library()
	}
	return reflect.TypeOf(a) == reflect.TypeOf(b)
}
