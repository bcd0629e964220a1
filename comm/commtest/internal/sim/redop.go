package sim

import (
	"encoding/binary"
	"math"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// preMulOp is an operator made by ncclRedOpCreatePreMulSum: each rank multiplies its
// own input by its scalar, then the contributions are summed. Like NCCL, the operator
// is resolved when a collective is enqueued, so destroying it afterwards does not
// affect that collective; a device scalar is read when the collective runs.
type preMulOp struct {
	dt     gpulib.DataType
	host   []byte     // ncclScalarHostImmediate: the element, copied at creation
	dev    gpulib.Ptr // ncclScalarDevice: its address
	device bool
}

// RedOpCreatePreMulSum is ncclRedOpCreatePreMulSum.
func (d *Driver) RedOpCreatePreMulSum(c gpulib.Comm, dt gpulib.DataType, scalar uint64, device bool) (gpulib.RedOp, error) {
	const call = "ncclRedOpCreatePreMulSum"
	return locked(d, call, 0, func(w *World) (gpulib.RedOp, error) {
		rc, err := w.commLocked(d.dev, c, call)
		if err != nil {
			return 0, err
		}
		es := elemSize(dt)
		if es == 0 {
			return 0, ncclErr(gpulib.InvalidArgument, call, "invalid data type %d", int32(dt))
		}
		op := &preMulOp{dt: dt, device: device}
		if device {
			if err := d.dev.check(gpulib.Ptr(scalar), uint64(es)); err != nil {
				return 0, ncclErr(gpulib.InvalidArgument, call, "scalar [%#x, +%d): %v", scalar, es, err)
			}
			op.dev = gpulib.Ptr(scalar)
		} else {
			b := make([]byte, 8)
			binary.LittleEndian.PutUint64(b, scalar)
			op.host = b[:es]
		}
		if rc.redOps == nil {
			rc.redOps = map[gpulib.RedOp]*preMulOp{}
		}
		h := gpulib.NumOps
		for rc.redOps[h] != nil {
			h++
		}
		rc.redOps[h] = op
		return h, nil
	})
}

// RedOpDestroy is ncclRedOpDestroy.
func (d *Driver) RedOpDestroy(c gpulib.Comm, op gpulib.RedOp) error {
	const call = "ncclRedOpDestroy"
	_, err := locked(d, call, 0, func(w *World) (struct{}, error) {
		rc, err := w.commLocked(d.dev, c, call)
		if err != nil {
			return struct{}{}, err
		}
		if rc.redOps[op] == nil {
			return struct{}{}, ncclErr(gpulib.InvalidArgument, call, "operator %d was not created on communicator %#x or is destroyed", int32(op), uintptr(c))
		}
		delete(rc.redOps, op)
		return struct{}{}, nil
	})
	return err
}

// preMultiply multiplies every element of dt in in by scalar (one element), in the
// element type's arithmetic: integers wrap, floats round once to the type.
func preMultiply(dt gpulib.DataType, in, scalar []byte) []byte {
	es := elemSize(dt)
	out := make([]byte, len(in))
	switch dt {
	case gpulib.Float32:
		s := math.Float32frombits(binary.LittleEndian.Uint32(scalar))
		for i := 0; i < len(in); i += 4 {
			v := math.Float32frombits(binary.LittleEndian.Uint32(in[i:]))
			binary.LittleEndian.PutUint32(out[i:], math.Float32bits(v*s))
		}
	case gpulib.Float64:
		s := math.Float64frombits(binary.LittleEndian.Uint64(scalar))
		for i := 0; i < len(in); i += 8 {
			v := math.Float64frombits(binary.LittleEndian.Uint64(in[i:]))
			binary.LittleEndian.PutUint64(out[i:], math.Float64bits(v*s))
		}
	case gpulib.Float16, gpulib.Bfloat16, gpulib.Float8e4m3, gpulib.Float8e5m2:
		f := narrowOf(dt)
		s := f.decode(uint16(load(scalar, es)))
		for i := 0; i < len(in); i += es {
			store(out[i:], es, uint64(f.encode(f.decode(uint16(load(in[i:], es)))*s)))
		}
	default:
		s := load(scalar, es)
		for i := 0; i < len(in); i += es {
			store(out[i:], es, load(in[i:], es)*s)
		}
	}
	return out
}
