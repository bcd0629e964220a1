package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// Test values shared by the host emulation (hostemu_test.go) and the GPU
// tests (gpu_test.go, build tag gpu).

// edgeBF16 and edgeF16 are the values where the arithmetic has special
// cases: signed zeros, smallest and largest subnormals, smallest normal,
// largest finite, infinities, NaNs with payloads and signs, values one
// ulp apart that make ties.
var (
	edgeBF16 = []uint16{0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x807f, 0x0080, 0x8080,
		0x7f7f, 0xff7f, 0x7f7e, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xff81, 0x7fff, 0xffff,
		0x3f80, 0xbf80, 0x3f81, 0x3b80, 0xbb80, 0x3b7f, 0x4000, 0x0040, 0x00ff, 0x0100}
	edgeF16 = []uint16{0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x8400,
		0x7bff, 0xfbff, 0x7bfe, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0xfc01, 0x7fff, 0xffff,
		0x3c00, 0xbc00, 0x3c01, 0x1000, 0x9000, 0x4c00, 0x4800, 0x5000, 0x0200}
	// edgeF32 adds to the same kinds of values the ones whose sums overflow
	// or tie at the top of the range: the largest finite value plus half its
	// ulp (0x73000000, which ties and rounds to infinity), a little less
	// (0x72ffffff, which stays finite) and a little more; 2^127, whose double
	// overflows; NaNs quiet and signaling, with small and large payloads,
	// of both signs.
	edgeF32 = []uint32{0, 0x80000000, 1, 0x80000001, 2, 0x00400000, 0x007fffff, 0x807fffff,
		0x00800000, 0x80800000, 0x00800001, 0x7f7fffff, 0xff7fffff, 0x7f7ffffe, 0x7f000000,
		0xff000000, 0x73000000, 0xf3000000, 0x72ffffff, 0x73000001, 0x7f800000, 0xff800000,
		0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fbfffff, 0x7fc00001, 0x7fffffff,
		0xffffffff, 0x3f800000, 0xbf800000, 0x33800000, 0x33800001, 0x3f800001, 0x4b800000,
		0xcb800001, 0x34000000}
)

// alignmentCases calls f for every element offset of dst and src within 16 bytes
// (doff, soff) and every length n: dst and src are random buffers of n + 2*per elements
// (per elements in 16 bytes), want is dst with the reference sum of src[soff:soff+n]
// in dst[doff:doff+n]. It stops when f returns false.
func alignmentCases(t testing.TB, k Kind, lengths []int, rng *rand.Rand, f func(dst, src, want []byte, doff, soff, n int) bool) {
	t.Helper()
	size, err := k.ElemSize()
	require.NoError(t, err)
	per := 16 / size
	for doff := range per {
		for soff := range per {
			for _, n := range lengths {
				dst := randomElems(rng, k, n+2*per)
				src := randomElems(rng, k, n+2*per)
				want := append([]byte(nil), dst...)
				refAdd(t, k, want[doff*size:(doff+n)*size], src[soff*size:(soff+n)*size])
				if !f(dst, src, want, doff, soff, n) {
					return
				}
			}
		}
	}
}

func randomElems(rng *rand.Rand, k Kind, n int) []byte {
	size, _ := k.ElemSize()
	b := make([]byte, n*size)
	for i := 0; i < len(b); i += 4 {
		var w [4]byte
		binary.LittleEndian.PutUint32(w[:], rng.Uint32())
		copy(b[i:], w[:])
	}
	return b
}

// refAdd applies the reference add of kind k to little-endian element bytes.
func refAdd(t testing.TB, k Kind, dst, src []byte) {
	t.Helper()
	switch k {
	case BF16, F16:
		d, s := decode16(dst), decode16(src)
		if k == BF16 {
			require.NoError(t, AddBF16(d, s))
		} else {
			require.NoError(t, AddF16(d, s))
		}
		for i, v := range d {
			binary.LittleEndian.PutUint16(dst[2*i:], v)
		}
	case F32:
		d := make([]float32, len(dst)/4)
		s := make([]float32, len(src)/4)
		for i := range d {
			d[i] = math.Float32frombits(binary.LittleEndian.Uint32(dst[4*i:]))
			s[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
		require.NoError(t, AddF32(d, s))
		for i, v := range d {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	default:
		require.Failf(t, "refAdd", "unknown kind %v", k)
	}
}

func decode16(b []byte) []uint16 {
	v := make([]uint16, len(b)/2)
	for i := range v {
		v[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return v
}
