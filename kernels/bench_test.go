package kernels

import (
	"math/rand/v2"
	"testing"
)

// The reference adds run in the simulator's all-reduce path. Their figure
// of merit is throughput relative to copy(): each benchmark sets bytes to
// the same 2 reads + 1 write per element as the kernels, so compare the
// MB/s of BenchmarkAddBF16Reference with BenchmarkCopyBaseline from the same
// run (go test -run '^$' -bench . -benchmem ./kernels).

const benchElems = 1 << 20

// benchData16 returns normally distributed values (the common case)
// encoded with conv.
func benchData16(conv func(float32) uint16) (dst, src []uint16) {
	rng := rand.New(rand.NewPCG(5, 6))
	dst = make([]uint16, benchElems)
	src = make([]uint16, benchElems)
	for i := range dst {
		dst[i] = conv(float32(rng.NormFloat64()))
		src[i] = conv(float32(rng.NormFloat64()))
	}
	return dst, src
}

func BenchmarkCopyBaseline(b *testing.B) {
	dst, src := benchData16(Float32ToBF16)
	b.SetBytes(3 * 2 * benchElems)
	b.ReportAllocs()
	for b.Loop() {
		copy(dst, src)
	}
}

func BenchmarkAddBF16Reference(b *testing.B) {
	dst, src := benchData16(Float32ToBF16)
	b.SetBytes(3 * 2 * benchElems)
	b.ReportAllocs()
	for b.Loop() {
		_ = AddBF16(dst, src)
	}
}

func BenchmarkAddF16Reference(b *testing.B) {
	dst, src := benchData16(Float32ToF16)
	b.SetBytes(3 * 2 * benchElems)
	b.ReportAllocs()
	for b.Loop() {
		_ = AddF16(dst, src)
	}
}

func BenchmarkAddF32Reference(b *testing.B) {
	dst := make([]float32, benchElems/2)
	src := make([]float32, benchElems/2)
	for i := range dst {
		dst[i], src[i] = float32(i), 1
	}
	b.SetBytes(3 * 2 * benchElems)
	b.ReportAllocs()
	for b.Loop() {
		_ = AddF32(dst, src)
	}
}
