//go:build cgo

package cbench

/*
#include <stdint.h>

static int cbench_call_int_intp(uintptr_t fp, int *v) {
	return ((int (*)(int *))fp)(v);
}
#cgo noescape cbench_call_int_intp
#cgo nocallback cbench_call_int_intp
*/
import "C"

import "unsafe"

// CallIntPtr calls fp as int (*)(int *) (ncclGetVersion, cuDriverGetVersion) with v
// and returns its result.
func CallIntPtr(fp uintptr, v *int32) int32 {
	return int32(C.cbench_call_int_intp(C.uintptr_t(fp), (*C.int)(unsafe.Pointer(v))))
}
