//go:build cgo

package mpi

/*
#cgo LDFLAGS: -ldl -lpthread
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// A progress thread runs one blocking MPI call at a time for a goroutine that waits for it
// on a timer: MPI makes all the rounds of the call on this thread, outside Go's scheduler.
// K_TESTALL polls MPI_Testall until the requests complete or fail, as MPI_Waitall
// would, or until the goroutine sets cancel (its context ended); flag says which.
// Handles (Open MPI's are pointers) and counts travel as uintptr_t and are converted to
// each function's own parameter types here.

enum { K_ALLREDUCE = 1, K_REDUCE, K_BCAST, K_ALLGATHER, K_REDUCE_SCATTER_BLOCK, K_GATHER, K_SCATTER, K_ALLTOALL, K_ALLTOALLV, K_TESTALL, K_QUIT };

typedef struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int kind; // the call posted, 0 when none, K_QUIT to end the thread
	uintptr_t fp, a[9];
	int rc;
	int flag;       // K_TESTALL: MPI_Testall's flag when it returned
	int32_t cancel; // K_TESTALL: set by Go to stop polling (atomic)
	int32_t done; // 1 once rc is set (release); read by Go with an atomic load
	pthread_t th;
} ncclgo_progress;

typedef int (*f_allreduce)(const void *, void *, int, void *, void *, void *);
typedef int (*f_reduce)(const void *, void *, int, void *, void *, int, void *);
typedef int (*f_bcast)(void *, int, void *, int, void *);
typedef int (*f_allgather)(const void *, int, void *, void *, int, void *, void *);
typedef int (*f_rsb)(const void *, void *, int, void *, void *, void *);
typedef int (*f_rooted)(const void *, int, void *, void *, int, void *, int, void *);
typedef int (*f_testall)(int, void *, int *, void *);
typedef int (*f_alltoallv)(const void *, const int *, const int *, void *, void *, const int *, const int *, void *, void *);

#define P(i) ((void *)a[i])
#define I(i) ((int)(intptr_t)a[i])

// ncclgo_call makes the call kind of the function at fp with arguments a. Addresses
// travel as uintptr_t, so that Go never holds MPI_IN_PLACE ((void *)1) in a pointer.
static int ncclgo_call(int kind, uintptr_t fp, const uintptr_t *a, int *flag, int32_t *cancel) {
	switch (kind) {
	case K_ALLREDUCE: return ((f_allreduce)fp)(P(0), P(1), I(2), P(3), P(4), P(5));
	case K_REDUCE: return ((f_reduce)fp)(P(0), P(1), I(2), P(3), P(4), I(5), P(6));
	case K_BCAST: return ((f_bcast)fp)(P(0), I(1), P(2), I(3), P(4));
	case K_ALLGATHER:
	case K_ALLTOALL: return ((f_allgather)fp)(P(0), I(1), P(2), P(3), I(4), P(5), P(6));
	case K_REDUCE_SCATTER_BLOCK: return ((f_rsb)fp)(P(0), P(1), I(2), P(3), P(4), P(5));
	case K_GATHER:
	case K_SCATTER: return ((f_rooted)fp)(P(0), I(1), P(2), P(3), I(4), P(5), I(6), P(7));
	case K_ALLTOALLV: return ((f_alltoallv)fp)(P(0), P(1), P(2), P(3), P(4), P(5), P(6), P(7), P(8));
	case K_TESTALL:
		for (;;) {
			int rc = ((f_testall)fp)(I(0), P(1), flag, P(2));
			if (rc != 0 || *flag || __atomic_load_n(cancel, __ATOMIC_ACQUIRE)) return rc;
		}
	}
	return -1;
}

static int ncclgo_progress_call(ncclgo_progress *w) {
	return ncclgo_call(w->kind, w->fp, w->a, &w->flag, &w->cancel);
}

// ncclgo_mpi_call makes a call other than K_TESTALL on the calling thread.
static int ncclgo_mpi_call(int kind, uintptr_t fp, uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3,
		uintptr_t a4, uintptr_t a5, uintptr_t a6, uintptr_t a7, uintptr_t a8) {
	uintptr_t a[9] = {a0, a1, a2, a3, a4, a5, a6, a7, a8};
	int flag = 0;
	int32_t cancel = 1;
	return ncclgo_call(kind, fp, a, &flag, &cancel);
}

static void *ncclgo_progress_main(void *arg) {
	ncclgo_progress *w = arg;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (w->kind == 0) pthread_cond_wait(&w->cv, &w->mu);
		if (w->kind == K_QUIT) break;
		pthread_mutex_unlock(&w->mu);
		int rc = ncclgo_progress_call(w);
		pthread_mutex_lock(&w->mu);
		w->kind = 0;
		w->rc = rc;
		__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

// ncclgo_progress_start starts a progress thread with every signal blocked (they stay
// with Go's threads); NULL when it could not.
static ncclgo_progress *ncclgo_progress_start(void) {
	ncclgo_progress *w = calloc(1, sizeof *w);
	if (w == NULL) return NULL;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int err = pthread_create(&w->th, NULL, ncclgo_progress_main, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err != 0) {
		free(w);
		return NULL;
	}
	return w;
}

static void ncclgo_progress_post(ncclgo_progress *w, int kind, uintptr_t fp, uintptr_t a0, uintptr_t a1, uintptr_t a2,
		uintptr_t a3, uintptr_t a4, uintptr_t a5, uintptr_t a6, uintptr_t a7, uintptr_t a8) {
	pthread_mutex_lock(&w->mu);
	w->fp = fp;
	w->a[0] = a0, w->a[1] = a1, w->a[2] = a2, w->a[3] = a3, w->a[4] = a4, w->a[5] = a5, w->a[6] = a6, w->a[7] = a7, w->a[8] = a8;
	__atomic_store_n(&w->done, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&w->cancel, 0, __ATOMIC_RELAXED);
	w->flag = 0;
	w->kind = kind;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

// ncclgo_progress_stop ends the thread (between calls) and frees it.
static void ncclgo_progress_stop(ncclgo_progress *w) {
	pthread_mutex_lock(&w->mu);
	w->kind = K_QUIT;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->th, NULL);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	free(w);
}

// ncclgo_mpi_sym resolves an MPI function in the library loaded from path (already
// loaded by raw/mpi); 0 when it is not there.
static uintptr_t ncclgo_mpi_sym(const char *path, const char *name) {
	void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
	if (h == NULL) return 0;
	uintptr_t p = (uintptr_t)dlsym(h, name);
	dlclose(h);
	return p;
}
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/raw/mpi"
)

// The blocking calls a progress thread runs, and their C names.
const (
	callAllreduce          = C.K_ALLREDUCE
	callReduce             = C.K_REDUCE
	callBcast              = C.K_BCAST
	callAllgather          = C.K_ALLGATHER
	callReduceScatterBlock = C.K_REDUCE_SCATTER_BLOCK
	callGather             = C.K_GATHER
	callScatter            = C.K_SCATTER
	callAlltoall           = C.K_ALLTOALL
	callAlltoallv          = C.K_ALLTOALLV
	callTestall            = C.K_TESTALL
)

var callNames = map[int]string{
	callAllreduce: "MPI_Allreduce", callReduce: "MPI_Reduce", callBcast: "MPI_Bcast",
	callAllgather: "MPI_Allgather", callReduceScatterBlock: "MPI_Reduce_scatter_block",
	callGather: "MPI_Gather", callScatter: "MPI_Scatter", callAlltoall: "MPI_Alltoall",
	callAlltoallv: "MPI_Alltoallv", callTestall: "MPI_Testall",
}

// progress is a communicator's progress thread, started on first use.
type progress struct {
	w *C.ncclgo_progress
}

// procFns holds the addresses of the MPI functions that call makes (on the calling
// thread or a progress thread), resolved once per process.
type procFns struct {
	fp  [callTestall + 1]uintptr // by call kind
	err error
}

// resolveFns resolves the MPI functions of callNames in the loaded library.
func resolveFns() procFns {
	path := C.CString(mpi.LibraryInfo().Path)
	defer C.free(unsafe.Pointer(path))
	var f procFns
	for k, name := range callNames {
		n := C.CString(name)
		p := uintptr(C.ncclgo_mpi_sym(path, n))
		C.free(unsafe.Pointer(n))
		if p == 0 {
			f.err = fmt.Errorf("%s not found in %s", name, mpi.LibraryInfo().Path)
			return f
		}
		f.fp[k] = p
	}
	return f
}

// call makes the blocking MPI call kind with args (addresses as uintptr; MPI_IN_PLACE,
// whose value 1 no Go pointer may hold, is mpi.InPlace): on the communicator's progress
// thread under contention (offload), else on the calling goroutine. The caller holds c.mu.
func (c *Communicator) call(kind int, args ...uintptr) error {
	if ran, err := c.offload(kind, args...); ran {
		return err
	}
	fns := c.p.fns()
	if fns.err != nil {
		return fns.err
	}
	var a [9]C.uintptr_t
	for i, v := range args {
		a[i] = C.uintptr_t(v)
	}
	return mpiResult(C.ncclgo_mpi_call(C.int(kind), C.uintptr_t(fns.fp[kind]), a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]))
}

// offload runs the blocking call kind with args on the communicator's progress thread and
// waits for it on a timer, while other goroutines wait for a P (c.contended); the caller
// holds c.mu. It returns ran false (and runs nothing) when the process is not contended
// or there is no progress thread to run it: the caller then makes the call itself.
//
// Waiting: the goroutine naps (time.Sleep) from mpiNapMin doubling to mpiNapMax and
// checks the call's completion after each nap. A goroutine woken by its timer runs next
// on its P, ahead of the goroutines in the run queues, so the wait costs at most one
// scheduling slice of another goroutine per nap, however many rounds the call makes on
// the progress thread (and lockedNap gives it a slice of its own).
func (c *Communicator) offload(kind int, args ...uintptr) (ran bool, err error) {
	if !c.contended.Load() {
		return false, nil
	}
	w := c.post(kind, args...)
	if w == nil {
		return false, nil
	}
	done := (*atomic.Int32)(unsafe.Pointer(&w.done))
	for nap := mpiNapMin; !spinUntil(done); nap = min(2*nap, mpiNapMax) {
		lockedNap(nap)
	}
	c.contended.Store(runnableGoroutines() > 0)
	return true, mpiResult(w.rc)
}

// mpiResult is the error of an MPI return code, nil for MPI_SUCCESS.
func mpiResult(rc C.int) error {
	if rc := mpi.ErrorCode(rc); rc != mpi.Success {
		return rc
	}
	return nil
}

// post hands the call kind with args to the communicator's progress thread, starting it
// if need be; nil when there is none to run it. The caller holds c.mu.
func (c *Communicator) post(kind int, args ...uintptr) *C.ncclgo_progress {
	fns := c.p.fns()
	if fns.err != nil {
		return nil
	}
	if c.prog.w == nil {
		if c.prog.w = C.ncclgo_progress_start(); c.prog.w == nil {
			return nil
		}
	}
	var a [9]C.uintptr_t
	for i, v := range args {
		a[i] = C.uintptr_t(v)
	}
	c.offloads++
	C.ncclgo_progress_post(c.prog.w, C.int(kind), C.uintptr_t(fns.fp[kind]), a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8])
	return c.prog.w
}

// testallOffloaded polls MPI_Testall on c.reqs on the progress thread until they
// complete or fail, or ctx ends, while the goroutine naps as offload's does; the caller
// holds c.mu and has requests pending. It returns ran false (and polls nothing) when
// there is no progress thread, and otherwise MPI_Testall's last flag and error.
func (c *Communicator) testallOffloaded(ctx context.Context) (ran bool, flag int32, err error) {
	var pin runtime.Pinner // the progress thread writes the requests and statuses
	defer pin.Unpin()
	pin.Pin(&c.reqs[0])
	pin.Pin(&c.stats[0])
	w := c.post(callTestall, uintptr(len(c.reqs)), uintptr(unsafe.Pointer(&c.reqs[0])), uintptr(unsafe.Pointer(&c.stats[0])))
	if w == nil {
		return false, 0, nil
	}
	done := (*atomic.Int32)(unsafe.Pointer(&w.done))
	cancel := (*atomic.Int32)(unsafe.Pointer(&w.cancel))
	for nap := mpiNapMin; !spinUntil(done); nap = min(2*nap, mpiNapMax) {
		lockedNap(nap)
		if ctx.Err() != nil {
			cancel.Store(1) // the thread returns after its current MPI_Testall
		}
	}
	c.contended.Store(runnableGoroutines() > 0)
	if rc := mpi.ErrorCode(w.rc); rc != mpi.Success {
		return true, int32(w.flag), rc
	}
	return true, int32(w.flag), nil
}

// spinUntil polls done for mpiSpinFor and says whether it was set. A call the progress
// thread completes at once (a broadcast whose data has arrived, a barrier the last rank
// entered) then costs no nap: under contention, each nap costs a scheduling slice of the
// goroutine holding the P, however short the nap.
func spinUntil(done *atomic.Int32) bool {
	for start := time.Now(); done.Load() == 0; {
		if time.Since(start) >= mpiSpinFor {
			return false
		}
	}
	return true
}

// stop ends the progress thread, if one was started; the caller holds c.mu.
func (p *progress) stop() {
	if p.w != nil {
		C.ncclgo_progress_stop(p.w)
		p.w = nil
	}
}

// The MPI functions the progress threads call, resolved once per process.
var (
	progressFnsOnce sync.Once
	progressFns     procFns
)

// fns resolves, once, the functions the progress threads call.
func (p *mpiProcess) fns() procFns {
	progressFnsOnce.Do(func() { progressFns = resolveFns() })
	return progressFns
}
