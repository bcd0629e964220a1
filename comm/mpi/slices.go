package mpi

import (
	"fmt"
	"reflect"
	"runtime"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
)

// The typed slice form of the Communicator's collectives and point-to-point calls, for
// host memory: the length of a slice is the count, and the library pins the memory for
// as long as MPI uses it (runtime.Pinner), so no unsafe.Pointer or DevicePtr is needed
// and a count can never overrun the slice. The DevicePtr methods stay for C memory and
// for device memory under a CUDA-aware MPI.

// Element is an element type MPI has a datatype for: the eight of Go's numeric types
// that the slice functions accept (and types defined on them).
type Element interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// dtypeOf is the comm element type of T.
func dtypeOf[T Element]() comm.DType {
	switch reflect.TypeFor[T]().Kind() {
	case reflect.Int8:
		return comm.Int8
	case reflect.Uint8:
		return comm.Uint8
	case reflect.Int32:
		return comm.Int32
	case reflect.Uint32:
		return comm.Uint32
	case reflect.Int64:
		return comm.Int64
	case reflect.Uint64:
		return comm.Uint64
	case reflect.Float32:
		return comm.Float32
	}
	return comm.Float64
}

// slicePtr pins s's array with pin and returns its address (0 for an empty slice).
func slicePtr[T Element](pin *runtime.Pinner, s []T) comm.DevicePtr {
	if len(s) == 0 {
		return 0
	}
	pin.Pin(&s[0])
	return comm.DevicePtr(uintptr(unsafe.Pointer(&s[0])))
}

// lengthErr is the error of a slice whose length does not fit the call.
func lengthErr(op, arg string, got, want int, why string) error {
	return &comm.ArgError{Op: op, Arg: arg, Value: got, Err: comm.ErrInvalidSize,
		Reason: fmt.Sprintf("has %d elements, want %d (%s)", got, want, why)}
}

// AllReduce reduces buf across ranks with op, in place: Communicator.AllReduce of
// len(buf) elements.
func AllReduce[T Element](c *Communicator, buf []T, op comm.ReduceOp) error {
	var pin runtime.Pinner
	defer pin.Unpin()
	return c.AllReduce(slicePtr(&pin, buf), len(buf), dtypeOf[T](), op)
}

// AllReduceInto reduces send across ranks with op into recv, which must have the same
// length: Communicator.AllReduceInto.
func AllReduceInto[T Element](c *Communicator, send, recv []T, op comm.ReduceOp) error {
	if len(recv) != len(send) {
		return lengthErr(core.OpAllReduceInto, "recv", len(recv), len(send), "len(send)")
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	return c.AllReduceInto(slicePtr(&pin, send), slicePtr(&pin, recv), len(send), dtypeOf[T](), op)
}

// Broadcast copies buf on root to buf on every rank, whose lengths must agree:
// Communicator.Broadcast of len(buf) elements.
func Broadcast[T Element](c *Communicator, buf []T, root int) error {
	var pin runtime.Pinner
	defer pin.Unpin()
	return c.Broadcast(slicePtr(&pin, buf), len(buf), dtypeOf[T](), root)
}

// AllGather gathers send from every rank into recv in rank order; recv must hold
// len(send) × WorldSize() elements: Communicator.AllGather.
func AllGather[T Element](c *Communicator, send, recv []T) error {
	if want := len(send) * c.WorldSize(); len(recv) != want {
		return lengthErr(core.OpAllGather, "recv", len(recv), want, fmt.Sprintf("len(send) × %d ranks", c.WorldSize()))
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	return c.AllGather(slicePtr(&pin, send), slicePtr(&pin, recv), len(send), dtypeOf[T]())
}

// ReduceScatter reduces send across ranks with op and leaves block Rank() in recv; send
// must hold len(recv) × WorldSize() elements: Communicator.ReduceScatter.
func ReduceScatter[T Element](c *Communicator, send, recv []T, op comm.ReduceOp) error {
	if want := len(recv) * c.WorldSize(); len(send) != want {
		return lengthErr(core.OpReduceScatter, "send", len(send), want, fmt.Sprintf("len(recv) × %d ranks", c.WorldSize()))
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	return c.ReduceScatter(slicePtr(&pin, send), slicePtr(&pin, recv), len(recv), dtypeOf[T](), op)
}

// Send posts a send of buf to dest with tag: Communicator.Send of len(buf) elements. It
// completes in Sync, Barrier or Close, which unpin buf; buf must stay untouched until
// then.
func Send[T Element](c *Communicator, buf []T, dest int, tag uint32) error {
	return p2pSlice(c, buf, func(p comm.DevicePtr) error { return c.Send(p, len(buf), dtypeOf[T](), dest, tag) })
}

// Recv posts a receive into buf from src with tag: Communicator.Recv of len(buf)
// elements. The data is there after Sync, Barrier or Close, which unpin buf.
func Recv[T Element](c *Communicator, buf []T, src int, tag uint32) error {
	return p2pSlice(c, buf, func(p comm.DevicePtr) error { return c.Recv(p, len(buf), dtypeOf[T](), src, tag) })
}

// p2pSlice posts a point-to-point call on buf, keeping buf pinned until the call's
// completion (c.pins, unpinned when the requests complete or are cancelled).
func p2pSlice[T Element](c *Communicator, buf []T, post func(comm.DevicePtr) error) error {
	var pin runtime.Pinner
	p := slicePtr(&pin, buf)
	if err := post(p); err != nil {
		pin.Unpin()
		return err
	}
	c.mu.Lock()
	c.pins = append(c.pins, &pin)
	c.mu.Unlock()
	return nil
}

// unpinAll releases the pins of completed point-to-point calls; the caller holds c.mu.
func (c *Communicator) unpinAll() {
	for _, p := range c.pins {
		p.Unpin()
	}
	c.pins = c.pins[:0]
}
