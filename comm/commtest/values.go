package commtest

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/kernels"
)

// EncodeValues returns vals as little-endian elements of type t: floating types round to
// nearest even (fp8 saturates), integer types truncate towards zero and wrap.
func EncodeValues(t comm.DType, vals []float64) ([]byte, error) {
	es := t.Size()
	if es == 0 {
		return nil, fmt.Errorf("encode values: element type %v: %w", t, comm.ErrInvalidType)
	}
	b := make([]byte, es*len(vals))
	for i, v := range vals {
		putValue(b[i*es:], t, v)
	}
	return b, nil
}

// DecodeValues returns the elements of type t in b (whose length must be a multiple of
// the element size) as float64 values.
func DecodeValues(t comm.DType, b []byte) ([]float64, error) {
	es := t.Size()
	if es == 0 {
		return nil, fmt.Errorf("decode values: element type %v: %w", t, comm.ErrInvalidType)
	}
	if len(b)%es != 0 {
		return nil, fmt.Errorf("decode values: %d bytes is not a multiple of %d (%v): %w", len(b), es, t, comm.ErrInvalidSize)
	}
	out := make([]float64, len(b)/es)
	for i := range out {
		out[i] = value(b[i*es:], t)
	}
	return out, nil
}

// EncodeValue writes v as one element of type t at the start of dst, rounded as
// EncodeValues rounds. It is EncodeValues for one element, without allocating.
func EncodeValue(t comm.DType, dst []byte, v float64) error {
	if err := checkElement("encode value", t, len(dst)); err != nil {
		return err
	}
	putValue(dst, t, v)
	return nil
}

// DecodeValue reads the element of type t at the start of src.
func DecodeValue(t comm.DType, src []byte) (float64, error) {
	if err := checkElement("decode value", t, len(src)); err != nil {
		return math.NaN(), err
	}
	return value(src, t), nil
}

// checkElement fails unless t is valid and n bytes hold one element of it.
func checkElement(op string, t comm.DType, n int) error {
	if !t.Valid() {
		return fmt.Errorf("%s: element type %v: %w", op, t, comm.ErrInvalidType)
	}
	if n < t.Size() {
		return fmt.Errorf("%s: %d bytes hold no %v element: %w", op, n, t, comm.ErrInvalidSize)
	}
	return nil
}

func putValue(b []byte, t comm.DType, v float64) {
	switch t {
	case comm.Int8, comm.Uint8:
		b[0] = byte(toInt(v))
	case comm.Int32, comm.Uint32:
		binary.LittleEndian.PutUint32(b, uint32(toInt(v)))
	case comm.Int64, comm.Uint64:
		binary.LittleEndian.PutUint64(b, uint64(toInt(v)))
	case comm.Float16:
		binary.LittleEndian.PutUint16(b, kernels.Float32ToF16(float32(v)))
	case comm.BFloat16:
		binary.LittleEndian.PutUint16(b, kernels.Float32ToBF16(float32(v)))
	case comm.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case comm.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	case comm.Float8E4M3:
		b[0] = kernels.Float32ToE4M3(float32(v))
	case comm.Float8E5M2:
		b[0] = kernels.Float32ToE5M2(float32(v))
	}
}

// toInt converts v to an integer, truncating towards zero; values beyond int64 wrap
// through uint64 so that large unsigned values survive.
func toInt(v float64) int64 {
	if v >= math.MaxInt64 {
		return int64(uint64(v))
	}
	return int64(v)
}

func value(b []byte, t comm.DType) float64 {
	switch t {
	case comm.Int8:
		return float64(int8(b[0]))
	case comm.Uint8:
		return float64(b[0])
	case comm.Int32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case comm.Uint32:
		return float64(binary.LittleEndian.Uint32(b))
	case comm.Int64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case comm.Uint64:
		return float64(binary.LittleEndian.Uint64(b))
	case comm.Float16:
		return float64(kernels.F16ToFloat32(binary.LittleEndian.Uint16(b)))
	case comm.BFloat16:
		return float64(kernels.BF16ToFloat32(binary.LittleEndian.Uint16(b)))
	case comm.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case comm.Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case comm.Float8E4M3:
		return float64(kernels.E4M3ToFloat32(b[0]))
	case comm.Float8E5M2:
		return float64(kernels.E5M2ToFloat32(b[0]))
	}
	return math.NaN()
}

// allTypes lists every element type, in NCCL's order.
var allTypes = []comm.DType{comm.Int8, comm.Uint8, comm.Int32, comm.Uint32, comm.Int64, comm.Uint64,
	comm.Float16, comm.Float32, comm.Float64, comm.BFloat16, comm.Float8E4M3, comm.Float8E5M2}

func unsigned(t comm.DType) bool {
	return t == comm.Uint8 || t == comm.Uint32 || t == comm.Uint64
}
