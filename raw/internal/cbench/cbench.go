//go:build cgo

package cbench

/*
#include <stdint.h>

static int cbench_call_int_intp(uintptr_t fp, int *v) {
	return ((int (*)(int *))fp)(v);
}
#cgo noescape cbench_call_int_intp
#cgo nocallback cbench_call_int_intp

// cbench_group makes, in C, a group of n sends and receives on the NULL communicator:
// ncclGroupStart, n alternating ncclSend/ncclRecv (peer i, 8 floats), ncclGroupEnd.
static void cbench_group(uintptr_t start, uintptr_t end, uintptr_t send, uintptr_t recv, int n) {
	typedef int (*g)(void);
	typedef int (*p2p)(void *, size_t, int, int, void *, void *);
	((g)start)();
	for (int i = 0; i < n; i++) {
		((p2p)(i % 2 == 0 ? send : recv))((void *)0, 8, 7, i, (void *)0, (void *)0);
	}
	((g)end)();
}
#cgo noescape cbench_group
#cgo nocallback cbench_group
*/
import "C"

import "unsafe"

// CallIntPtr calls fp as int (*)(int *) (ncclGetVersion, cuDriverGetVersion) with v
// and returns its result.
func CallIntPtr(fp uintptr, v *int32) int32 {
	return int32(C.cbench_call_int_intp(C.uintptr_t(fp), (*C.int)(unsafe.Pointer(v))))
}

// Group makes, in one C function, what a group of n sends and receives on the NULL
// communicator calls: ncclGroupStart, n alternating ncclSend/ncclRecv (peer i, 8 floats
// of type 7, ncclFloat32), ncclGroupEnd, given their addresses. It is the floor of
// raw/nccl's Batch benchmark: the library's own time for the calls, with no Go around them.
func Group(start, end, send, recv uintptr, n int) {
	C.cbench_group(C.uintptr_t(start), C.uintptr_t(end), C.uintptr_t(send), C.uintptr_t(recv), C.int(n))
}
