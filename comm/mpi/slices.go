package mpi

import (
	"fmt"
	"reflect"
	"runtime"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/kernels"
)

// The typed slice form of the Communicator's collectives and point-to-point calls, for
// host memory: the length of a slice is the count, and the library pins the memory for
// as long as MPI uses it (runtime.Pinner), so no unsafe.Pointer or DevicePtr is needed
// and a count can never overrun the slice. The DevicePtr methods stay for C memory and
// for device memory under a CUDA-aware MPI.

// Element is an element type of the slice functions: the eight of Go's numeric types
// that MPI has a datatype for (and types defined on them), and the storage types of
// the four formats that reduce through the communicator's own operators: BFloat16,
// Float16, Float8E4M3 and Float8E5M2 (those four types themselves; a type defined on
// Float8E4M3 or Float8E5M2 is a uint8).
type Element interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64 | BFloat16 | Float16
}

// BFloat16 is the storage of one bfloat16 element (comm.BFloat16): its bits, the upper
// half of a float32's.
type BFloat16 uint16

// Float16 is the storage of one IEEE binary16 element (comm.Float16): its bits.
type Float16 uint16

// Float8E4M3 is the storage of one fp8 E4M3 element (comm.Float8E4M3, OCP's
// float8_e4m3fn: no infinities, 0x7f and 0xff are NaN): its bits.
type Float8E4M3 uint8

// Float8E5M2 is the storage of one fp8 E5M2 element (comm.Float8E5M2): its bits.
type Float8E5M2 uint8

// NewBFloat16 is f rounded to bfloat16 (to nearest, ties to even).
func NewBFloat16(f float32) BFloat16 { return BFloat16(kernels.Float32ToBF16(f)) }

// Float32 is b's value.
func (b BFloat16) Float32() float32 { return kernels.BF16ToFloat32(uint16(b)) }

// NewFloat16 is f rounded to float16 (to nearest, ties to even; overflow gives an
// infinity).
func NewFloat16(f float32) Float16 { return Float16(kernels.Float32ToF16(f)) }

// Float32 is h's value.
func (h Float16) Float32() float32 { return kernels.F16ToFloat32(uint16(h)) }

// NewFloat8E4M3 is f rounded to E4M3 (to nearest, ties to even; overflow saturates to
// ±448, as NCCL's conversion does).
func NewFloat8E4M3(f float32) Float8E4M3 { return Float8E4M3(kernels.Float32ToE4M3(f)) }

// Float32 is e's value.
func (e Float8E4M3) Float32() float32 { return kernels.E4M3ToFloat32(uint8(e)) }

// NewFloat8E5M2 is f rounded to E5M2 (to nearest, ties to even; overflow saturates to
// ±57344, as NCCL's conversion does).
func NewFloat8E5M2(f float32) Float8E5M2 { return Float8E5M2(kernels.Float32ToE5M2(f)) }

// Float32 is e's value.
func (e Float8E5M2) Float32() float32 { return kernels.E5M2ToFloat32(uint8(e)) }

// dtypeOf is the comm element type of T.
func dtypeOf[T Element]() comm.DType {
	switch reflect.TypeFor[T]() {
	case reflect.TypeFor[BFloat16]():
		return comm.BFloat16
	case reflect.TypeFor[Float16]():
		return comm.Float16
	case reflect.TypeFor[Float8E4M3]():
		return comm.Float8E4M3
	case reflect.TypeFor[Float8E5M2]():
		return comm.Float8E5M2
	}
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

// BroadcastInto copies send on root to recv on every rank: Communicator.BroadcastInto of
// len(recv) elements. send is read on root only, where it must have len(recv) elements;
// other ranks may pass nil.
func BroadcastInto[T Element](c *Communicator, send, recv []T, root int) error {
	if c.Rank() == root && len(send) != len(recv) {
		return lengthErr(core.OpBroadcastInto, "send", len(send), len(recv), "len(recv), on the root")
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	s := slicePtr(&pin, send)
	if c.Rank() != root {
		s = 0
	}
	return c.BroadcastInto(s, slicePtr(&pin, recv), len(recv), dtypeOf[T](), root)
}

// Reduce reduces send across ranks with op into recv on root: Communicator.Reduce of
// len(send) elements. recv is written on root only, where it must have len(send)
// elements; other ranks may pass nil.
func Reduce[T Element](c *Communicator, send, recv []T, op comm.ReduceOp, root int) error {
	if c.Rank() == root && len(recv) != len(send) {
		return lengthErr(core.OpReduce, "recv", len(recv), len(send), "len(send), on the root")
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	r := slicePtr(&pin, recv)
	if c.Rank() != root {
		r = 0
	}
	return c.Reduce(slicePtr(&pin, send), r, len(send), dtypeOf[T](), op, root)
}

// Gather collects send from every rank into recv on root, in rank order:
// Communicator.Gather of len(send) elements. On root recv must hold len(send) ×
// WorldSize() elements; other ranks may pass nil.
func Gather[T Element](c *Communicator, send, recv []T, root int) error {
	if want := len(send) * c.WorldSize(); c.Rank() == root && len(recv) != want {
		return lengthErr(core.OpGather, "recv", len(recv), want, fmt.Sprintf("len(send) × %d ranks, on the root", c.WorldSize()))
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	r := slicePtr(&pin, recv)
	if c.Rank() != root {
		r = 0
	}
	return c.Gather(slicePtr(&pin, send), r, len(send), dtypeOf[T](), root)
}

// Scatter sends block i of root's send to rank i's recv: Communicator.Scatter of
// len(recv) elements. On root send must hold len(recv) × WorldSize() elements; other
// ranks may pass nil.
func Scatter[T Element](c *Communicator, send, recv []T, root int) error {
	if want := len(recv) * c.WorldSize(); c.Rank() == root && len(send) != want {
		return lengthErr(core.OpScatter, "send", len(send), want, fmt.Sprintf("len(recv) × %d ranks, on the root", c.WorldSize()))
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	s := slicePtr(&pin, send)
	if c.Rank() != root {
		s = 0
	}
	return c.Scatter(s, slicePtr(&pin, recv), len(recv), dtypeOf[T](), root)
}

// AllToAll sends block j of send to rank j and receives rank i's block into block i of
// recv; send and recv must have the same length, a multiple of WorldSize():
// Communicator.AllToAll of len(send)/WorldSize() elements per block.
func AllToAll[T Element](c *Communicator, send, recv []T) error {
	n := c.WorldSize()
	if n > 0 && len(send)%n != 0 {
		return lengthErr(core.OpAllToAll, "send", len(send), len(send)/n*n, fmt.Sprintf("a multiple of %d ranks", n))
	}
	if len(recv) != len(send) {
		return lengthErr(core.OpAllToAll, "recv", len(recv), len(send), "len(send)")
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	return c.AllToAll(slicePtr(&pin, send), slicePtr(&pin, recv), len(send)/max(n, 1), dtypeOf[T]())
}

// AllToAllv is AllToAll with per-peer counts and displacements in elements
// (Communicator.AllToAllv): every displacement plus its count must lie within its
// slice.
func AllToAllv[T Element](c *Communicator, send []T, sendCounts, sendDispls []int, recv []T, recvCounts, recvDispls []int) error {
	for _, side := range []struct {
		arg            string
		buf            int
		counts, displs []int
	}{{"send", len(send), sendCounts, sendDispls}, {"recv", len(recv), recvCounts, recvDispls}} {
		for i := range min(len(side.counts), len(side.displs)) {
			if end := side.displs[i] + side.counts[i]; side.counts[i] > 0 && end > side.buf {
				return lengthErr(core.OpAllToAllv, side.arg, side.buf, end, fmt.Sprintf("displacement[%d] + count[%d]", i, i))
			}
		}
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	return c.AllToAllv(slicePtr(&pin, send), sendCounts, sendDispls, slicePtr(&pin, recv), recvCounts, recvDispls, dtypeOf[T]())
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
