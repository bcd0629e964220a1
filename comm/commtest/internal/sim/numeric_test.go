package sim

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/kernels"
)

func reduceOne(dt gpulib.DataType, op gpulib.RedOp, vals ...uint64) uint64 {
	es := elemSize(dt)
	srcs := make([][]byte, len(vals))
	for i, v := range vals {
		srcs[i] = make([]byte, es)
		store(srcs[i], es, v)
	}
	dst := make([]byte, es)
	reduce(dt, op, dst, srcs)
	return load(dst, es)
}

func f32(v float32) uint64 { return uint64(math.Float32bits(v)) }

func TestReduceHandCheckedVectors(t *testing.T) {
	tests := []struct {
		name string
		dt   gpulib.DataType
		op   gpulib.RedOp
		in   []uint64
		want uint64
	}{
		{"int8 sum wraps", gpulib.Int8, gpulib.Sum, []uint64{127, 1}, 0x80},
		{"uint8 prod wraps", gpulib.Uint8, gpulib.Prod, []uint64{16, 16}, 0},
		{"int8 max is signed", gpulib.Int8, gpulib.Max, []uint64{0xff, 1}, 1},
		{"uint8 max is unsigned", gpulib.Uint8, gpulib.Max, []uint64{0xff, 1}, 0xff},
		{"int32 min is signed", gpulib.Int32, gpulib.Min, []uint64{0xffffffff, 5}, 0xffffffff},
		{"int32 avg truncates towards zero", gpulib.Int32, gpulib.Avg, []uint64{uint64(0xfffffff9), 0}, uint64(0xfffffffd)},
		{"uint32 avg of a wrapped sum", gpulib.Uint32, gpulib.Avg, []uint64{0xffffffff, 3}, 1},
		{"int64 sum wraps", gpulib.Int64, gpulib.Sum, []uint64{math.MaxInt64, 1}, 1 << 63},
		{"bf16 tie rounds to even (down)", gpulib.Bfloat16, gpulib.Sum, []uint64{0x3f80, 0x3b80}, 0x3f80},
		{"bf16 tie rounds to even (up)", gpulib.Bfloat16, gpulib.Sum, []uint64{0x3f81, 0x3b80}, 0x3f82},
		{"bf16 folds left rounding every step", gpulib.Bfloat16, gpulib.Sum, []uint64{0x3f80, 0x3b80, 0x3b80}, 0x3f80},
		{"fp16 overflow is infinity", gpulib.Float16, gpulib.Sum, []uint64{0x7bff, 0x4c00}, 0x7c00},
		{"fp16 NaN result is canonical", gpulib.Float16, gpulib.Sum, []uint64{0x7c00, 0xfc00}, 0x7fff},
		{"e4m3 saturates", gpulib.Float8e4m3, gpulib.Sum, []uint64{0x7e, 0x7e}, 0x7e},
		{"e5m2 saturates", gpulib.Float8e5m2, gpulib.Sum, []uint64{0x7b, 0x7b}, 0x7b},
		{"e4m3 negative saturates", gpulib.Float8e4m3, gpulib.Prod, []uint64{0x7e, 0xfe}, 0xfe},
		{"float32 max ignores NaN", gpulib.Float32, gpulib.Max, []uint64{canonicalNaN32, f32(1)}, f32(1)},
		{"float32 min ignores NaN", gpulib.Float32, gpulib.Min, []uint64{f32(-2), 0x7fc00001}, f32(-2)},
		{"float32 NaN sum is canonical", gpulib.Float32, gpulib.Sum, []uint64{0x7fc00001, f32(1)}, canonicalNaN32},
		{"float32 avg of three pre-multiplies", gpulib.Float32, gpulib.Avg, []uint64{f32(3), f32(3), f32(3)}, f32(float32(float32(float32(3)*float32(1.0/3)) * 3))},
		{"float64 avg of two", gpulib.Float64, gpulib.Avg, []uint64{math.Float64bits(3), math.Float64bits(4)}, math.Float64bits(3.5)},
		{"bf16 avg of four", gpulib.Bfloat16, gpulib.Avg, []uint64{0x4000, 0x4000, 0x4080, 0x4080}, 0x4040}, // 2,2,4,4 -> 3
		{"one rank keeps NaN payloads", gpulib.Float32, gpulib.Sum, []uint64{0x7fc00001}, 0x7fc00001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, reduceOne(tt.dt, tt.op, tt.in...), "%#x", reduceOne(tt.dt, tt.op, tt.in...))
		})
	}
}

// TestNarrowPairsAreCorrectlyRounded checks sum, prod, max and min of two random values
// of each narrow type against the exact float64 result rounded by the kernels package.
func TestNarrowPairsAreCorrectlyRounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	types := []struct {
		dt     gpulib.DataType
		bits   int
		decode func(uint64) float64
		encode func(float64) uint64
	}{
		{gpulib.Bfloat16, 16, func(c uint64) float64 { return float64(kernels.BF16ToFloat32(uint16(c))) },
			func(v float64) uint64 { return uint64(kernels.Float32ToBF16(float32(v))) }},
		{gpulib.Float16, 16, func(c uint64) float64 { return float64(kernels.F16ToFloat32(uint16(c))) },
			func(v float64) uint64 { return uint64(kernels.Float32ToF16(float32(v))) }},
		{gpulib.Float8e4m3, 8, func(c uint64) float64 { return float64(kernels.E4M3ToFloat32(uint8(c))) },
			func(v float64) uint64 { return uint64(kernels.Float32ToE4M3(float32(v))) }},
		{gpulib.Float8e5m2, 8, func(c uint64) float64 { return float64(kernels.E5M2ToFloat32(uint8(c))) },
			func(v float64) uint64 { return uint64(kernels.Float32ToE5M2(float32(v))) }},
	}
	for _, ty := range types {
		for range 20000 {
			a, b := rng.Uint64()&(1<<ty.bits-1), rng.Uint64()&(1<<ty.bits-1)
			x, y := ty.decode(a), ty.decode(b)
			if math.IsNaN(x) || math.IsNaN(y) {
				continue
			}
			for _, c := range []struct {
				op   gpulib.RedOp
				want float64
			}{{gpulib.Sum, x + y}, {gpulib.Prod, x * y}, {gpulib.Max, math.Max(x, y)}, {gpulib.Min, math.Min(x, y)}} {
				if (c.op == gpulib.Max || c.op == gpulib.Min) && x == 0 && y == 0 {
					continue // signed zeros: fmaxf may return either
				}
				got := reduceOne(ty.dt, c.op, a, b)
				require.Equal(t, ty.encode(c.want), got, "%s %s %#x %#x", dtypeName(ty.dt), opName(c.op), a, b)
			}
		}
	}
}

// TestIntegerReductionsMatchNativeArithmetic compares random multi-rank reductions of
// each integer type with Go's own wrapping arithmetic.
func TestIntegerReductionsMatchNativeArithmetic(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 2, 3, 8} {
		for range 2000 {
			v := make([]uint64, n)
			for i := range v {
				v[i] = rng.Uint64()
			}
			for _, op := range []gpulib.RedOp{gpulib.Sum, gpulib.Prod, gpulib.Max, gpulib.Min, gpulib.Avg} {
				require.Equal(t, uint64(uint8(native(op, n, v, func(x uint64) int8 { return int8(x) }))), reduceOne(gpulib.Int8, op, v...), "int8 %s", opName(op))
				require.Equal(t, uint64(native(op, n, v, func(x uint64) uint8 { return uint8(x) })), reduceOne(gpulib.Uint8, op, v...), "uint8 %s", opName(op))
				require.Equal(t, uint64(uint32(native(op, n, v, func(x uint64) int32 { return int32(x) }))), reduceOne(gpulib.Int32, op, v...), "int32 %s", opName(op))
				require.Equal(t, uint64(native(op, n, v, func(x uint64) uint32 { return uint32(x) })), reduceOne(gpulib.Uint32, op, v...), "uint32 %s", opName(op))
				require.Equal(t, uint64(native(op, n, v, func(x uint64) int64 { return int64(x) })), reduceOne(gpulib.Int64, op, v...), "int64 %s", opName(op))
				require.Equal(t, native(op, n, v, func(x uint64) uint64 { return x }), reduceOne(gpulib.Uint64, op, v...), "uint64 %s", opName(op))
			}
		}
	}
}

func native[T int8 | uint8 | int32 | uint32 | int64 | uint64](op gpulib.RedOp, n int, v []uint64, conv func(uint64) T) T {
	acc := conv(v[0])
	for _, x := range v[1:] {
		y := conv(x)
		switch op {
		case gpulib.Prod:
			acc *= y
		case gpulib.Max:
			acc = max(acc, y)
		case gpulib.Min:
			acc = min(acc, y)
		default:
			acc += y
		}
	}
	if op == gpulib.Avg {
		acc /= T(n)
	}
	return acc
}

func TestFloat32ReductionsFoldLeftInRankOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 5000 {
		n := 1 + rng.IntN(8)
		v := make([]uint64, n)
		fs := make([]float32, n)
		for i := range v {
			fs[i] = float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(40)-20)))
			v[i] = f32(fs[i])
		}
		sum, prod := fs[0], fs[0]
		for _, f := range fs[1:] {
			sum = float32(sum + f)
			prod = float32(prod * f)
		}
		require.Equal(t, f32(sum), reduceOne(gpulib.Float32, gpulib.Sum, v...))
		require.Equal(t, f32(prod), reduceOne(gpulib.Float32, gpulib.Prod, v...))
	}
}

func TestElementSizes(t *testing.T) {
	want := map[gpulib.DataType]int{gpulib.Int8: 1, gpulib.Uint8: 1, gpulib.Int32: 4, gpulib.Uint32: 4, gpulib.Int64: 8,
		gpulib.Uint64: 8, gpulib.Float16: 2, gpulib.Float32: 4, gpulib.Float64: 8, gpulib.Bfloat16: 2,
		gpulib.Float8e4m3: 1, gpulib.Float8e5m2: 1, -1: 0, 12: 0}
	for dt, size := range want {
		assert.Equal(t, size, elemSize(dt), dtypeName(dt))
	}
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, 0x0102030405060708)
	assert.Equal(t, uint64(0x0708), load(b, 2))
}

// BenchmarkReduce measures the simulator's reduction of two ranks' buffers against a
// copy of the same bytes (the baseline, in the same run).
func BenchmarkReduce(b *testing.B) {
	const bytes = 1 << 20
	srcs := [][]byte{make([]byte, bytes), make([]byte, bytes)}
	dst := make([]byte, bytes)
	for _, dt := range []gpulib.DataType{gpulib.Bfloat16, gpulib.Float32, gpulib.Int32, gpulib.Float8e4m3} {
		b.Run(dtypeName(dt), func(b *testing.B) {
			b.SetBytes(bytes)
			for b.Loop() {
				reduce(dt, gpulib.Sum, dst, srcs)
			}
		})
	}
	b.Run("baseline-copy", func(b *testing.B) {
		b.SetBytes(bytes)
		for b.Loop() {
			copy(dst, srcs[0])
		}
	})
}
