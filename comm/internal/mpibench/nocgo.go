//go:build !cgo

package mpibench

import (
	"errors"
	"unsafe"
)

// AllReduceLoop needs cgo.
func AllReduceLoop(int, unsafe.Pointer, int, uintptr, uintptr, uintptr) error {
	return errors.New("mpibench: needs cgo")
}

// Barrier needs cgo.
func Barrier(uintptr) error { return errors.New("mpibench: needs cgo") }

// Nop needs cgo; without it, it does nothing.
func Nop(uintptr) {}
