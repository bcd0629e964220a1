package sim

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/kernels"
)

// This file holds the simulator's arithmetic: element sizes, the narrow float formats
// and reductions with the results a GPU gives.
//
// Rules, per element type:
//   - integers wrap (two's complement); avg is the wrapped sum divided by the number of
//     ranks, truncated towards zero (NCCL's SumPostDiv);
//   - float32 and float64 use IEEE arithmetic of their own width; a NaN result is the
//     GPU's canonical NaN;
//   - float16, bfloat16 and both fp8 formats widen to float32, compute one operation and
//     round the result once to nearest even (float32 has more than twice their precision
//     plus two bits, so this is the correctly rounded result); fp8 saturates to its
//     largest finite value as NCCL's conversions (__NV_SATFINITE) do;
//   - max and min ignore a NaN operand (fmaxf semantics);
//   - avg of floating types multiplies each contribution by 1/n rounded to the type (fp8:
//     to float16) and sums (NCCL's PreMulSum);
//   - a reduction over ranks folds left in rank order, rounding after every step, as a
//     ring does; results are identical to NCCL whenever the order does not matter (two
//     ranks, integers, exactly representable partial sums).

// elemSize returns the size in bytes of one element of dt, or 0 if dt is not a valid type.
func elemSize(dt gpulib.DataType) int {
	switch dt {
	case gpulib.Int8, gpulib.Uint8, gpulib.Float8e4m3, gpulib.Float8e5m2:
		return 1
	case gpulib.Float16, gpulib.Bfloat16:
		return 2
	case gpulib.Int32, gpulib.Uint32, gpulib.Float32:
		return 4
	case gpulib.Int64, gpulib.Uint64, gpulib.Float64:
		return 8
	}
	return 0
}

var dtypeNames = [...]string{"ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64",
	"ncclUint64", "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16",
	"ncclFloat8e4m3", "ncclFloat8e5m2"}

func dtypeName(dt gpulib.DataType) string {
	if dt >= 0 && int(dt) < len(dtypeNames) {
		return dtypeNames[dt]
	}
	return fmt.Sprintf("ncclDataType(%d)", int32(dt))
}

var opNames = [...]string{"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"}

func opName(op gpulib.RedOp) string {
	if op >= 0 && int(op) < len(opNames) {
		return opNames[op]
	}
	return fmt.Sprintf("ncclRedOp(%d)", int32(op))
}

func validOp(op gpulib.RedOp) bool { return op >= gpulib.Sum && op <= gpulib.Avg }

// narrow is a floating-point format narrower than float32, converted with the kernels
// package's reference conversions (those of the GPU): encode rounds to nearest even, and
// the fp8 formats saturate (__NV_SATFINITE).
type narrow int

const (
	fmtF16 narrow = iota
	fmtBF16
	fmtE4M3
	fmtE5M2
)

func (f narrow) fp8() bool { return f == fmtE4M3 || f == fmtE5M2 }

func (f narrow) decode(c uint16) float32 {
	switch f {
	case fmtF16:
		return kernels.F16ToFloat32(c)
	case fmtBF16:
		return kernels.BF16ToFloat32(c)
	case fmtE4M3:
		return kernels.E4M3ToFloat32(uint8(c))
	}
	return kernels.E5M2ToFloat32(uint8(c))
}

func (f narrow) encode(v float32) uint16 {
	switch f {
	case fmtF16:
		return kernels.Float32ToF16(v)
	case fmtBF16:
		return kernels.Float32ToBF16(v)
	case fmtE4M3:
		return uint16(kernels.Float32ToE4M3(v))
	}
	return uint16(kernels.Float32ToE5M2(v))
}

const (
	canonicalNaN32 = 0x7fffffff
	canonicalNaN64 = 0x7fffffffffffffff
)

// fmax and fmin follow fmaxf/fminf: a NaN operand is ignored.
func fmax[T float32 | float64](a, b T) T {
	switch {
	case a != a:
		return b
	case b != b:
		return a
	case a > b || (a == b && !math.Signbit(float64(a))):
		return a
	}
	return b
}

func fmin[T float32 | float64](a, b T) T {
	switch {
	case a != a:
		return b
	case b != b:
		return a
	case a < b || (a == b && math.Signbit(float64(a))):
		return a
	}
	return b
}

// apply32 combines two float32 values with op (avg combines as sum; see reduce).
func apply32(op gpulib.RedOp, a, b float32) float32 {
	switch op {
	case gpulib.Prod:
		return float32(a * b)
	case gpulib.Max:
		return fmax(a, b)
	case gpulib.Min:
		return fmin(a, b)
	}
	return float32(a + b)
}

func apply64(op gpulib.RedOp, a, b float64) float64 {
	switch op {
	case gpulib.Prod:
		return float64(a * b)
	case gpulib.Max:
		return fmax(a, b)
	case gpulib.Min:
		return fmin(a, b)
	}
	return float64(a + b)
}

// applyInt combines two integers (sign-extended if signed) with op; the low bits of the
// result are those of the element type's wrapping result.
func applyInt(op gpulib.RedOp, signed bool, a, b uint64) uint64 {
	switch op {
	case gpulib.Prod:
		return a * b
	case gpulib.Max, gpulib.Min:
		less := a < b
		if signed {
			less = int64(a) < int64(b)
		}
		if less == (op == gpulib.Min) {
			return a
		}
		return b
	}
	return a + b
}

// reduce folds srcs (one contribution per rank, in rank order) into dst with op on
// elements of type dt. dst and every src have the same length, a multiple of the
// element size. dst may alias srcs[0].
func reduce(dt gpulib.DataType, op gpulib.RedOp, dst []byte, srcs [][]byte) {
	n := len(srcs)
	es := elemSize(dt)
	if n == 1 && op != gpulib.Avg {
		copy(dst, srcs[0]) // one rank: a copy, bits kept
		return
	}
	switch dt {
	case gpulib.Float32:
		scale := float32(1 / float64(n))
		for i := 0; i < len(dst); i += 4 {
			acc := loadF32(srcs[0][i:], op, scale)
			for _, s := range srcs[1:] {
				acc = apply32(op, acc, loadF32(s[i:], op, scale))
			}
			if acc != acc {
				binary.LittleEndian.PutUint32(dst[i:], canonicalNaN32)
			} else {
				binary.LittleEndian.PutUint32(dst[i:], math.Float32bits(acc))
			}
		}
	case gpulib.Float64:
		scale := 1 / float64(n)
		for i := 0; i < len(dst); i += 8 {
			acc := loadF64(srcs[0][i:], op, scale)
			for _, s := range srcs[1:] {
				acc = apply64(op, acc, loadF64(s[i:], op, scale))
			}
			if acc != acc {
				binary.LittleEndian.PutUint64(dst[i:], canonicalNaN64)
			} else {
				binary.LittleEndian.PutUint64(dst[i:], math.Float64bits(acc))
			}
		}
	case gpulib.Float16, gpulib.Bfloat16, gpulib.Float8e4m3, gpulib.Float8e5m2:
		f := narrowOf(dt)
		scale := f.avgScale(n)
		for i := 0; i < len(dst); i += es {
			acc := f.load(srcs[0][i:], es, op, scale)
			for _, s := range srcs[1:] {
				acc = f.encode(apply32(op, f.decode(acc), f.decode(f.load(s[i:], es, op, scale))))
			}
			store(dst[i:], es, uint64(acc))
		}
	default:
		signed := dt == gpulib.Int8 || dt == gpulib.Int32 || dt == gpulib.Int64
		for i := 0; i < len(dst); i += es {
			acc := loadInt(srcs[0][i:], es, signed)
			for _, s := range srcs[1:] {
				acc = applyInt(op, signed, acc, loadInt(s[i:], es, signed))
			}
			if op == gpulib.Avg {
				acc = avgInt(acc, es, signed, n)
			}
			store(dst[i:], es, acc)
		}
	}
}

func narrowOf(dt gpulib.DataType) narrow {
	switch dt {
	case gpulib.Float16:
		return fmtF16
	case gpulib.Bfloat16:
		return fmtBF16
	case gpulib.Float8e4m3:
		return fmtE4M3
	}
	return fmtE5M2
}

// avgScale is 1/n rounded to the format (to float16 for the fp8 formats).
func (f narrow) avgScale(n int) float32 {
	s := f
	if f.fp8() {
		s = fmtF16
	}
	return s.decode(s.encode(float32(1 / float64(n))))
}

// load reads one element; for avg it returns the pre-multiplied contribution.
func (f narrow) load(b []byte, es int, op gpulib.RedOp, scale float32) uint16 {
	c := uint16(load(b, es))
	if op != gpulib.Avg {
		return c
	}
	return f.encode(float32(f.decode(c) * scale))
}

func loadF32(b []byte, op gpulib.RedOp, scale float32) float32 {
	v := math.Float32frombits(binary.LittleEndian.Uint32(b))
	if op == gpulib.Avg {
		v = float32(v * scale)
	}
	return v
}

func loadF64(b []byte, op gpulib.RedOp, scale float64) float64 {
	v := math.Float64frombits(binary.LittleEndian.Uint64(b))
	if op == gpulib.Avg {
		v = float64(v * scale)
	}
	return v
}

func load(b []byte, es int) uint64 {
	switch es {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}

// loadInt reads one integer, sign-extended to 64 bits if signed, so that 64-bit
// arithmetic wraps like the element type's and comparisons order it correctly.
func loadInt(b []byte, es int, signed bool) uint64 {
	v := load(b, es)
	if signed && es < 8 {
		shift := uint(64 - 8*es)
		v = uint64(int64(v<<shift) >> shift)
	}
	return v
}

func store(b []byte, es int, v uint64) {
	switch es {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	default:
		binary.LittleEndian.PutUint64(b, v)
	}
}

// avgInt divides the wrapped sum acc of es-byte integers by n.
func avgInt(acc uint64, es int, signed bool, n int) uint64 {
	bits := uint(es * 8)
	if !signed {
		if bits < 64 {
			acc &= 1<<bits - 1
		}
		return acc / uint64(n)
	}
	s := int64(acc<<(64-bits)) >> (64 - bits) // sign-extend the low bits
	return uint64(s / int64(n))
}
