//go:build cgo

package mpibench

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>

typedef int (*ncclgo_allreduce_fn)(const void *, void *, int, void *, void *, void *);
typedef int (*ncclgo_barrier_fn)(void *);

// mpibench_sym resolves name into *f once, in the libmpi that raw/mpi loaded (RTLD_NOLOAD:
// never a second copy): 0, or -1 when libmpi is not loaded, -2 without the symbol.
static int mpibench_sym(void **f, const char *name) {
	if (*f) return 0;
	void *h = dlopen("libmpi.so.40", RTLD_NOW | RTLD_NOLOAD);
	if (!h) return -1;
	*f = dlsym(h, name);
	return *f ? 0 : -2;
}

// n calls of MPI_Allreduce(MPI_IN_PLACE, buf, count, dt, op, comm); returns the first
// error code, or mpibench_sym's. buf is char * so that cgo does not check it (as raw/mpi's
// message buffers): the loop called once per MPI call is the floor of a Go caller's cost.
static int mpibench_allreduce(int n, char *buf, int count, uintptr_t dt, uintptr_t op, uintptr_t comm) {
	static void *sym;
	int e = mpibench_sym(&sym, "MPI_Allreduce");
	if (e) return e;
	ncclgo_allreduce_fn f = (ncclgo_allreduce_fn)sym;
	for (int i = 0; i < n; i++) {
		int r = f((void *)1, buf, count, (void *)dt, (void *)op, (void *)comm);
		if (r != 0) return r;
	}
	return 0;
}
#cgo noescape mpibench_allreduce
#cgo nocallback mpibench_allreduce

// MPI_Barrier(comm) of the loaded libmpi; the same codes as mpibench_allreduce.
static int mpibench_barrier(uintptr_t comm) {
	static void *sym;
	int e = mpibench_sym(&sym, "MPI_Barrier");
	if (e) return e;
	return ((ncclgo_barrier_fn)sym)((void *)comm);
}

// An empty C function: what one cgo call costs with nothing on the C side.
static void mpibench_nop(uintptr_t a) { (void)a; }
#cgo noescape mpibench_nop
#cgo nocallback mpibench_nop
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// AllReduceLoop calls MPI_Allreduce(MPI_IN_PLACE, buf, count, dt, op, comm) n times in C.
// dt, op and comm are Open MPI handles (raw/mpi's Datatype, Op, Comm values).
func AllReduceLoop(n int, buf unsafe.Pointer, count int, dt, op, comm uintptr) error {
	return check("MPI_Allreduce", C.mpibench_allreduce(C.int(n), (*C.char)(buf), C.int(count), C.uintptr_t(dt), C.uintptr_t(op), C.uintptr_t(comm)))
}

// Barrier calls MPI_Barrier(comm) in C; comm is an Open MPI handle.
func Barrier(comm uintptr) error {
	return check("MPI_Barrier", C.mpibench_barrier(C.uintptr_t(comm)))
}

// Nop makes one cgo call of an empty C function, the floor of any cgo binding's cost.
func Nop(a uintptr) { C.mpibench_nop(C.uintptr_t(a)) }

func check(fn string, r C.int) error {
	switch r {
	case 0:
		return nil
	case -1:
		return fmt.Errorf("mpibench: libmpi.so.40 is not loaded")
	case -2:
		return fmt.Errorf("mpibench: libmpi.so.40 has no %s", fn)
	default:
		return fmt.Errorf("mpibench: %s returned %d", fn, int(r))
	}
}
