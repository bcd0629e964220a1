//go:build cgo

package mpi

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/ncclgo/ncclgo/kernels"
)

// The C user functions that reduce float16, bfloat16 and fp8 under MPI must agree bit
// for bit with the Go reference: kernels.AddBF16 and AddF16 for sums, and the
// simulator's widen-combine-round rule (kernels' conversions) for the other operators.

type narrowRef struct {
	name   string
	f      int
	size   int
	decode func(uint16) float32
	encode func(float32) uint16
	n      int // number of bit patterns
}

var narrowRefs = []narrowRef{
	{"float16", mpiF16, 2, kernels.F16ToFloat32, kernels.Float32ToF16, 1 << 16},
	{"bfloat16", mpiBF16, 2, kernels.BF16ToFloat32, kernels.Float32ToBF16, 1 << 16},
	{"float8e4m3", mpiE4M3, 1, func(c uint16) float32 { return kernels.E4M3ToFloat32(uint8(c)) },
		func(v float32) uint16 { return uint16(kernels.Float32ToE4M3(v)) }, 1 << 8},
	{"float8e5m2", mpiE5M2, 1, func(c uint16) float32 { return kernels.E5M2ToFloat32(uint8(c)) },
		func(v float32) uint16 { return uint16(kernels.Float32ToE5M2(v)) }, 1 << 8},
}

func refApply(op int, a, b float32) float32 {
	switch op {
	case mpiOpProd:
		return a * b
	case mpiOpMax, mpiOpMin:
		switch {
		case a != a:
			return b
		case b != b:
			return a
		}
		first := a > b || (a == b && !math.Signbit(float64(a)))
		if op == mpiOpMin {
			first = a < b || (a == b && math.Signbit(float64(a)))
		}
		if first {
			return a
		}
		return b
	}
	return a + b
}

// operands returns every bit pattern as x, paired with y drawn from every pattern (fp8) or
// a fixed random sample plus the special values (16-bit formats).
func operands(r narrowRef) (xs, ys []uint16) {
	rng := rand.New(rand.NewPCG(12, 34))
	var pick []uint16
	if r.n <= 256 {
		for y := range r.n {
			pick = append(pick, uint16(y))
		}
	} else {
		pick = []uint16{0, 0x8000, 0x7fff, 0xffff, 0x0001, 0x8001, 0x7c00, 0xfc00, 0x7f80, 0xff80, 0x3c00, 0x3f80, 0x7bff, 0x7f7f, 0x0400, 0x0080}
		for range 16 {
			pick = append(pick, uint16(rng.UintN(1<<16)))
		}
	}
	for x := range r.n {
		for _, y := range pick {
			xs = append(xs, uint16(x))
			ys = append(ys, y)
		}
	}
	return xs, ys
}

func TestMPINarrowReductionsMatchTheGoReferenceBitForBit(t *testing.T) {
	for _, r := range narrowRefs {
		xs, ys := operands(r)
		for _, op := range []int{mpiOpSum, mpiOpProd, mpiOpMax, mpiOpMin} {
			want := make([]uint16, len(xs))
			for i := range xs {
				want[i] = r.encode(refApply(op, r.decode(xs[i]), r.decode(ys[i])))
			}
			if op == mpiOpSum && r.size == 2 {
				// The kernels' own add reference, for the two formats it has one for.
				ref := append([]uint16(nil), ys...)
				add := kernels.AddBF16
				if r.f == mpiF16 {
					add = kernels.AddF16
				}
				if err := add(ref, xs); err != nil {
					t.Fatal(err)
				}
				want = ref
			}
			got := combineC(r, op, xs, ys)
			bad := 0
			for i := range want {
				if got[i] != want[i] {
					if bad < 5 {
						t.Errorf("%s op %d: %#x with %#x gives %#x, reference %#x", r.name, op, xs[i], ys[i], got[i], want[i])
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%s op %d: %d of %d results differ", r.name, op, bad, len(want))
			}
		}
	}
}

// combineC runs the C user function on xs (in) and ys (inout).
func combineC(r narrowRef, op int, xs, ys []uint16) []uint16 {
	if r.size == 2 {
		out := append([]uint16(nil), ys...)
		in := append([]uint16(nil), xs...)
		mpiCombine(r.f, op, unsafe.Pointer(&in[0]), unsafe.Pointer(&out[0]), len(in))
		return out
	}
	in, out := make([]uint8, len(xs)), make([]uint8, len(ys))
	for i := range xs {
		in[i], out[i] = uint8(xs[i]), uint8(ys[i])
	}
	mpiCombine(r.f, op, unsafe.Pointer(&in[0]), unsafe.Pointer(&out[0]), len(in))
	res := make([]uint16, len(out))
	for i, v := range out {
		res[i] = uint16(v)
	}
	return res
}
