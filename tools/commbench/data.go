package main

import (
	"math"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
)

// The host reference. Inputs are small integers chosen so that every result is exact
// in every element type, whatever order the library reduces in: sums stay below the
// largest integer the type holds exactly, products are exactly 2. Only avg on floating
// types rounds (NCCL scales each input by 1/n); it is compared with a tolerance.

// exactLimit is the largest integer that t holds exactly together with every smaller
// one (sums up to it are exact in any order).
func exactLimit(t comm.DType) int64 {
	switch t {
	case comm.Int8:
		return math.MaxInt8
	case comm.Uint8:
		return math.MaxUint8
	case comm.Float8E5M2:
		return 8 // 3 significant bits
	case comm.Float8E4M3:
		return 16 // 4 significant bits
	case comm.BFloat16:
		return 256 // 8 significant bits
	case comm.Float16:
		return 2048 // 11 significant bits
	}
	return 1 << 24 // wide enough for every count commbench uses
}

// modulus is the number of distinct input values for n ranks: sums of n inputs below
// it stay exact.
func modulus(t comm.DType, n int) int64 {
	return min(97, exactLimit(t)/int64(n)+1)
}

// input is element i of rank's input for a reduction with op on n ranks.
func input(t comm.DType, op comm.ReduceOp, n, rank int, i int64) float64 {
	if op == comm.Prod {
		if i%int64(n) == int64(rank) {
			return 2
		}
		return 1
	}
	return float64((int64(rank) + i) % modulus(t, n))
}

// reduce is the exact reference of op over the inputs of all n ranks at element i.
func reduce(t comm.DType, op comm.ReduceOp, n int, i int64) float64 {
	acc := input(t, op, n, 0, i)
	for r := 1; r < n; r++ {
		v := input(t, op, n, r, i)
		switch op {
		case comm.Sum, comm.Avg:
			acc += v
		case comm.Prod:
			acc *= v
		case comm.Max:
			acc = max(acc, v)
		case comm.Min:
			acc = min(acc, v)
		}
	}
	if op == comm.Avg {
		if isFloat(t) {
			return acc / float64(n)
		}
		return math.Floor(acc / float64(n)) // NCCL divides the integer sum
	}
	return acc
}

func isFloat(t comm.DType) bool {
	switch t {
	case comm.Float16, comm.Float32, comm.Float64, comm.BFloat16, comm.Float8E4M3, comm.Float8E5M2:
		return true
	}
	return false
}

// epsilon is the relative spacing of t's values near 1 (0 for integer types).
func epsilon(t comm.DType) float64 {
	switch t {
	case comm.Float8E5M2:
		return 0x1p-2
	case comm.Float8E4M3:
		return 0x1p-3
	case comm.BFloat16:
		return 0x1p-7
	case comm.Float16:
		return 0x1p-10
	case comm.Float32:
		return 0x1p-23
	case comm.Float64:
		return 0x1p-52
	}
	return 0
}

// tolerance is how far a result may be from the reference: 0 (exact) except for avg
// on floating types, where each of the n scaled inputs and partial sums may round.
func tolerance(t comm.DType, op comm.ReduceOp, n int, want float64) float64 {
	if op != comm.Avg || !isFloat(t) {
		return 0
	}
	return float64(n) * epsilon(t) * max(1, math.Abs(want))
}

// encode writes v as element i of buf, which holds elements of type t. The callers
// size buf for the element type, so the only possible error is a bug: it is dropped.
func encode(t comm.DType, buf []byte, i int64, v float64) {
	size := int64(t.Size())
	_ = commtest.EncodeValue(t, buf[i*size:], v)
}

// decode reads element i of buf, which holds elements of type t (NaN on a bug).
func decode(t comm.DType, buf []byte, i int64) float64 {
	size := int64(t.Size())
	v, _ := commtest.DecodeValue(t, buf[i*size:])
	return v
}

// poison fills buf with 0xff bytes: NaN in every floating type, -1 or the maximum in
// the integer ones, never a value the reference produces.
func poison(buf []byte) {
	for i := range buf {
		buf[i] = 0xff
	}
}

// wrong counts the elements of got (elements of type t) that differ from want(i) by
// more than the tolerance.
func wrong(t comm.DType, op comm.ReduceOp, n int, got []byte, want func(i int64) float64) int64 {
	var bad int64
	count := int64(len(got) / t.Size())
	for i := range count {
		w, g := want(i), decode(t, got, i)
		if math.IsNaN(g) || math.Abs(g-w) > tolerance(t, op, n, w) {
			bad++
		}
	}
	return bad
}
