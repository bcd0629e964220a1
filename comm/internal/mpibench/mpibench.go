//go:build cgo

package mpibench

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>

typedef int (*ncclgo_allreduce_fn)(const void *, void *, int, void *, void *, void *);

// The libmpi that raw/mpi loaded (RTLD_NOLOAD: never a second copy), then n calls of
// MPI_Allreduce(MPI_IN_PLACE, buf, count, dt, op, comm). Returns the first error code,
// -1 when libmpi is not loaded, -2 without the symbol.
static int mpibench_allreduce(int n, void *buf, int count, uintptr_t dt, uintptr_t op, uintptr_t comm) {
	static ncclgo_allreduce_fn f;
	if (!f) {
		void *h = dlopen("libmpi.so.40", RTLD_NOW | RTLD_NOLOAD);
		if (!h) return -1;
		f = (ncclgo_allreduce_fn)dlsym(h, "MPI_Allreduce");
		if (!f) return -2;
	}
	for (int i = 0; i < n; i++) {
		int r = f((void *)1, buf, count, (void *)dt, (void *)op, (void *)comm);
		if (r != 0) return r;
	}
	return 0;
}
#cgo noescape mpibench_allreduce
#cgo nocallback mpibench_allreduce
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// AllReduceLoop calls MPI_Allreduce(MPI_IN_PLACE, buf, count, dt, op, comm) n times in C.
// dt, op and comm are Open MPI handles (raw/mpi's Datatype, Op, Comm values).
func AllReduceLoop(n int, buf unsafe.Pointer, count int, dt, op, comm uintptr) error {
	switch r := C.mpibench_allreduce(C.int(n), buf, C.int(count), C.uintptr_t(dt), C.uintptr_t(op), C.uintptr_t(comm)); r {
	case 0:
		return nil
	case -1:
		return fmt.Errorf("mpibench: libmpi.so.40 is not loaded")
	case -2:
		return fmt.Errorf("mpibench: libmpi.so.40 has no MPI_Allreduce")
	default:
		return fmt.Errorf("mpibench: MPI_Allreduce returned %d", int(r))
	}
}
