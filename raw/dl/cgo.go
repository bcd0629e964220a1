//go:build cgo && linux

package dl

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// The loader's message is read on the thread that failed, inside the same C call.
static void ncclgo_dl_msg(char *buf, size_t n) {
	const char *m = dlerror();
	snprintf(buf, n, "%s", m ? m : "unknown loader error");
}

static uintptr_t ncclgo_dl_open(const char *path, char *buf, size_t n) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		ncclgo_dl_msg(buf, n);
		return 0;
	}
	struct link_map *lm = NULL;
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm != NULL && lm->l_name != NULL && lm->l_name[0] != 0) {
		snprintf(buf, n, "%s", lm->l_name);
	} else {
		snprintf(buf, n, "%s", path);
	}
	return (uintptr_t)h;
}

static uintptr_t ncclgo_dl_sym(uintptr_t h, const char *name, char *buf, size_t n) {
	dlerror();
	void *p = dlsym((void *)h, name);
	if (p == NULL) {
		ncclgo_dl_msg(buf, n);
	}
	return (uintptr_t)p;
}

static int ncclgo_dl_call_version(uintptr_t fp, int *code) {
	return ((int (*)(int *))fp)(code);
}
*/
import "C"

import (
	"bytes"
	"errors"
	"unsafe"
)

// haveDL says dlopen is available.
const haveDL = true

// msgLen bounds the loader messages and resolved paths copied back from C.
const msgLen = 4096

// cstr returns a NUL-terminated copy of s in C memory; the caller frees it.
func cstr(s string) *C.char { return C.CString(s) }

func goStr(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// dlopen opens path (a file or a soname) and returns the handle and the file the
// loader actually mapped.
func dlopen(path string) (uintptr, string, error) {
	if bytes.IndexByte([]byte(path), 0) >= 0 {
		return 0, "", errors.New("path contains a NUL byte")
	}
	p := cstr(path)
	defer C.free(unsafe.Pointer(p))
	buf := make([]byte, msgLen)
	h := C.ncclgo_dl_open(p, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	if h == 0 {
		return 0, "", errors.New(goStr(buf))
	}
	return uintptr(h), goStr(buf), nil
}

// dlsym looks name up in the library h.
func dlsym(h uintptr, name string) (uintptr, error) {
	if bytes.IndexByte([]byte(name), 0) >= 0 {
		return 0, errors.New("symbol name contains a NUL byte")
	}
	p := cstr(name)
	defer C.free(unsafe.Pointer(p))
	buf := make([]byte, msgLen)
	fp := C.ncclgo_dl_sym(C.uintptr_t(h), p, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	if fp == 0 {
		return 0, errors.New(goStr(buf))
	}
	return uintptr(fp), nil
}

// callVersion calls fp as int (*)(int *) and returns the code it stored.
func callVersion(fp uintptr) (int, bool) {
	var code C.int
	rc := C.ncclgo_dl_call_version(C.uintptr_t(fp), &code)
	return int(code), rc == 0
}
