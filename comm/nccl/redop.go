package nccl

import (
	"fmt"
	"math"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/kernels"
)

// PreMulSum operators: NCCL's ncclRedOpCreatePreMulSum makes a reduction operator of
// one communicator that multiplies every rank's input by a scalar before summing (the
// scalar on the host, copied at creation, or in device memory, read by every operation
// that uses it). comm hands it out as a ReduceOp valid on that communicator only, for
// the element type it was made for, until DestroyReduceOp, Close or AttemptReconnect
// (which replaces the communicator and with it its operators); any other use is an
// ErrInvalidOp error that never reaches NCCL.

// scalarBits encodes v as one element of t, little-endian in the low bytes. Integer
// types need an integral v in range; floating types round to nearest even (fp8
// saturates).
func scalarBits(t comm.DType, v float64) (uint64, error) {
	bad := func(reason string) error {
		return &comm.ArgError{Op: core.OpPreMulSum, Arg: "scalar", Value: v, Err: comm.ErrInvalidSize, Reason: reason}
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, bad("not finite")
	}
	switch t {
	case comm.Float16:
		return uint64(kernels.Float32ToF16(float32(v))), nil
	case comm.BFloat16:
		return uint64(kernels.Float32ToBF16(float32(v))), nil
	case comm.Float32:
		return uint64(math.Float32bits(float32(v))), nil
	case comm.Float64:
		return math.Float64bits(v), nil
	case comm.Float8E4M3:
		return uint64(kernels.Float32ToE4M3(float32(v))), nil
	case comm.Float8E5M2:
		return uint64(kernels.Float32ToE5M2(float32(v))), nil
	}
	if v != math.Trunc(v) {
		return 0, bad(fmt.Sprintf("not an integer (%s)", t))
	}
	bits := uint(8 * t.Size())
	signed := t == comm.Int8 || t == comm.Int32 || t == comm.Int64
	lo, hi := 0.0, math.Ldexp(1, int(bits)) // [lo, hi)
	if signed {
		lo, hi = -math.Ldexp(1, int(bits)-1), math.Ldexp(1, int(bits)-1)
	}
	if v < lo || v >= hi {
		return 0, bad(fmt.Sprintf("out of range of %s", t))
	}
	u := uint64(v)
	if signed {
		u = uint64(int64(v))
	}
	if bits < 64 {
		u &= 1<<bits - 1
	}
	return u, nil
}

// PreMulSum creates a reduction operator that multiplies every rank's input by scalar
// (encoded as one element of t: see scalarBits) and sums, for count elements of t on
// this communicator: ncclRedOpCreatePreMulSum with ncclScalarHostImmediate. Each rank
// passes its own scalar (PreMulSum(1/n) on every rank is an average). Release it with
// DestroyReduceOp; it ends with Close or AttemptReconnect. Not allowed inside a group.
func (c *Communicator) PreMulSum(t comm.DType, scalar float64) (comm.ReduceOp, error) {
	if _, err := c.g.Typed(core.OpPreMulSum, 0, t); err != nil {
		return 0, err
	}
	bits, err := scalarBits(t, scalar)
	if err != nil {
		return 0, err
	}
	return c.createOp(t, bits, false)
}

// PreMulSumDevice is PreMulSum with the scalar in device memory (one element of t at
// scalar, ncclScalarDevice): every operation using the operator reads it when it runs,
// so the value may change between operations (stream-ordered).
func (c *Communicator) PreMulSumDevice(t comm.DType, scalar comm.DevicePtr) (comm.ReduceOp, error) {
	if _, err := c.g.Typed(core.OpPreMulSum, 0, t); err != nil {
		return 0, err
	}
	if err := core.TypedBuffers(core.OpPreMulSum, t, true, core.Span{Arg: "scalar", P: scalar, Count: 1}); err != nil {
		return 0, err
	}
	return c.createOp(t, uint64(scalar), true)
}

func (c *Communicator) createOp(t comm.DType, scalar uint64, device bool) (comm.ReduceOp, error) {
	var op gpulib.RedOp
	err := c.enqueue(core.OpPreMulSum, -1, ungroupable, func(ncclOps) error {
		var err error
		op, err = c.d.RedOpCreatePreMulSum(c.comm, gpulib.DataType(t), scalar, device)
		return err
	})
	if err != nil {
		return 0, err
	}
	c.g.AddOp(comm.ReduceOp(op), t)
	return comm.ReduceOp(op), nil
}

// DestroyReduceOp releases an operator made by PreMulSum or PreMulSumDevice
// (ncclRedOpDestroy). Operations already enqueued with it are not affected; later ones
// fail with ErrInvalidOp.
func (c *Communicator) DestroyReduceOp(op comm.ReduceOp) error {
	if err := c.g.OutsideGroup("destroy-reduce-op"); err != nil {
		return err
	}
	if err := c.g.RemoveOp(op); err != nil {
		return err
	}
	return c.enqueue("destroy-reduce-op", -1, cleanup, func(ncclOps) error {
		return c.d.RedOpDestroy(c.comm, gpulib.RedOp(op))
	})
}
