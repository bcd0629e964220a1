package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The oracle in this file is written independently of numeric.go: formats
// are decoded with math.Ldexp from their fields, and rounding is done in
// float64 with math.RoundToEven on the value scaled by its quantum, then
// looked up in a table of every encoding. Nothing here shifts float32 bits.

// format describes a small binary floating-point format for the oracle.
type format struct {
	name   string
	mbits  int     // fraction bits
	bias   int     // exponent bias
	ebits  int     // exponent bits
	maxFin float64 // largest finite value
}

var (
	fmtBF16 = format{name: "bf16", mbits: 7, bias: 127, ebits: 8, maxFin: 0x1.fep127}
	fmtF16  = format{name: "fp16", mbits: 10, bias: 15, ebits: 5, maxFin: 65504}
)

// decode returns the value of a 16-bit pattern of f, from its fields.
func (f format) decode(code uint16) float64 {
	sign := 1.0
	if code&0x8000 != 0 {
		sign = -1
	}
	exp := int(code>>f.mbits) & (1<<f.ebits - 1)
	frac := float64(int(code) & (1<<f.mbits - 1))
	switch exp {
	case 1<<f.ebits - 1:
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	case 0:
		return sign * math.Ldexp(frac, 1-f.bias-f.mbits)
	}
	return sign * math.Ldexp(frac+math.Ldexp(1, f.mbits), exp-f.bias-f.mbits)
}

// oracle rounds to f by value, with a table from every finite value to its
// encoding.
type oracle struct {
	format
	codes map[float64]uint16
}

func newOracle(f format) *oracle {
	o := &oracle{format: f, codes: map[float64]uint16{}}
	for c := range 1 << 16 {
		v := f.decode(uint16(c))
		if math.IsNaN(v) || math.IsInf(v, 0) || v == 0 {
			continue
		}
		o.codes[v] = uint16(c)
	}
	return o
}

// round returns the encoding nearest to x+tail, ties to even, where x is a
// float64 and tail a much smaller correction (x+tail is the exact value;
// tail only matters to break what looks like a tie in x).
func (o *oracle) round(x, tail float64) uint16 {
	switch {
	case math.IsNaN(x):
		return 0x7fff
	case math.IsInf(x, 1):
		return o.inf(false)
	case math.IsInf(x, -1):
		return o.inf(true)
	case x == 0:
		if math.Signbit(x) {
			return 0x8000
		}
		return 0
	}
	_, e := math.Frexp(math.Abs(x)) // |x| in [2^(e-1), 2^e)
	exp := max(e-1, 1-o.bias)
	quantum := math.Ldexp(1, exp-o.mbits)
	q := x / quantum
	r := math.RoundToEven(q)
	if math.Abs(q-r) == 0.5 && tail != 0 {
		// Not a true tie: the exact value lies on tail's side.
		if tail > 0 {
			r = math.Ceil(q)
		} else {
			r = math.Floor(q)
		}
	}
	v := r * quantum
	if math.Abs(v) > o.maxFin {
		return o.inf(v < 0)
	}
	if v == 0 {
		if x < 0 {
			return 0x8000
		}
		return 0
	}
	c, ok := o.codes[v]
	if !ok {
		panic("oracle: value not in table") // a bug in this test, not in the product
	}
	return c
}

func (o *oracle) inf(negative bool) uint16 {
	c := uint16(1<<o.ebits-1) << o.mbits
	if negative {
		c |= 0x8000
	}
	return c
}

// addExact returns s = fl64(a+b) and the rounding error of that sum
// (Knuth's TwoSum), so s+err is the exact sum.
func addExact(a, b float64) (s, err float64) {
	s = a + b
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return s, 0
	}
	bv := s - a
	av := s - bv
	return s, (a - av) + (b - bv)
}

func isNaNCode(f format, c uint16) bool {
	return math.IsNaN(f.decode(c))
}

func TestBF16ToFloat32MatchesFieldDecodingForEveryPattern(t *testing.T) {
	for c := range 1 << 16 {
		got := BF16ToFloat32(uint16(c))
		want := fmtBF16.decode(uint16(c))
		if math.IsNaN(want) {
			require.True(t, math.IsNaN(float64(got)), "pattern %#04x", c)
			// The payload is kept: the upper half of the float32 is the input.
			require.Equal(t, uint32(c)<<16, math.Float32bits(got), "pattern %#04x", c)
			continue
		}
		require.Equal(t, want, float64(got), "pattern %#04x", c)
		require.Equal(t, math.Signbit(want), math.Signbit(float64(got)), "sign of %#04x", c)
	}
}

func TestF16ToFloat32MatchesFieldDecodingForEveryPattern(t *testing.T) {
	for c := range 1 << 16 {
		got := F16ToFloat32(uint16(c))
		want := fmtF16.decode(uint16(c))
		if math.IsNaN(want) {
			require.True(t, math.IsNaN(float64(got)), "pattern %#04x", c)
			require.Equal(t, c&0x8000 != 0, math.Signbit(float64(got)), "NaN sign of %#04x", c)
			continue
		}
		require.Equal(t, want, float64(got), "pattern %#04x", c)
		require.Equal(t, math.Signbit(want), math.Signbit(float64(got)), "sign of %#04x", c)
	}
}

func TestFloat32ToBF16HandCheckedVectors(t *testing.T) {
	tests := []struct {
		name string
		in   uint32 // float32 bits
		want uint16
		why  string
	}{
		{"one", 0x3f800000, 0x3f80, "1.0 is exact: upper half"},
		{"minus two", 0xc0000000, 0xc000, "exact, sign kept"},
		{"plus zero", 0x00000000, 0x0000, "exact"},
		{"minus zero", 0x80000000, 0x8000, "signed zero kept"},
		{"just below half ulp", 0x3f807fff, 0x3f80, "low half 0x7fff < 0x8000 rounds down"},
		{"tie to even down", 0x3f808000, 0x3f80, "1+2^-8 is halfway between 0x3f80 (even) and 0x3f81: even wins"},
		{"tie to even up", 0x3f818000, 0x3f82, "halfway between 0x3f81 (odd) and 0x3f82 (even): even wins"},
		{"just above half ulp", 0x3f808001, 0x3f81, "above the tie rounds up"},
		{"carry into exponent", 0x3fffffff, 0x4000, "1.99999988 rounds up to 2.0: fraction carry bumps the exponent"},
		{"largest finite stays", 0x7f7f0000, 0x7f7f, "0x1.fep127 is bf16's largest finite value"},
		{"max float32 overflows", 0x7f7fffff, 0x7f80, "beyond 0x1.fep127 + half ulp: rounds to +inf"},
		{"tie at the top overflows", 0x7f7f8000, 0x7f80, "halfway between 0x7f7f (odd) and 2^128 (inf, even): inf"},
		{"plus inf", 0x7f800000, 0x7f80, "infinity kept"},
		{"minus inf", 0xff800000, 0xff80, "infinity kept"},
		{"quiet NaN", 0x7fc00000, 0x7fff, "NaN becomes the canonical NaN"},
		{"negative NaN", 0xffc00001, 0x7fff, "NaN becomes the canonical NaN whatever its sign"},
		{"signalling NaN low payload", 0x7f800001, 0x7fff, "payload only in the low half: must not turn into inf"},
		{"smallest bf16 subnormal", 0x00010000, 0x0001, "2^-133 is exact"},
		{"float32 subnormal rounds to zero", 0x00008000, 0x0000, "2^-134 is a tie between 0 (even) and 2^-133: zero"},
		{"float32 subnormal rounds up", 0x00008001, 0x0001, "just above the tie"},
		{"negative subnormal tie", 0x80018000, 0x8002, "halfway between 0x8001 and 0x8002 (even)"},
		{"largest subnormal to smallest normal", 0x007fffff, 0x0080, "rounds up across the subnormal/normal border"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Float32ToBF16(math.Float32frombits(tt.in))
			assert.Equal(t, tt.want, got, "%#08x: %s", tt.in, tt.why)
		})
	}
}

func TestFloat32ToF16HandCheckedVectors(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
		why  string
	}{
		{"one", 1, 0x3c00, "exponent 15, fraction 0"},
		{"minus two", -2, 0xc000, "exponent 16, sign set"},
		{"minus zero", float32(math.Copysign(0, -1)), 0x8000, "signed zero kept"},
		{"largest finite", 65504, 0x7bff, "0x1.ffcp15"},
		{"below overflow tie", 65519.996, 0x7bff, "below 65520, the midpoint to 65536: rounds down"},
		{"overflow tie", 65520, 0x7c00, "midpoint between 65504 (odd fraction) and 65536 (inf): even side is inf"},
		{"overflow", 1e6, 0x7c00, "beyond range: inf"},
		{"minus overflow", -1e6, 0xfc00, "beyond range: -inf"},
		{"tie to even down", 1 + 0x1p-11, 0x3c00, "halfway between 1 and 1+2^-10: even (1) wins"},
		{"tie to even up", 1 + 3*0x1p-11, 0x3c02, "halfway between 1+2^-10 (odd) and 1+2^-9 (even)"},
		{"smallest normal", 0x1p-14, 0x0400, "exponent field 1"},
		{"largest subnormal", 0x3ffp-24, 0x03ff, "1023 * 2^-24"},
		{"smallest subnormal", 0x1p-24, 0x0001, "2^-24"},
		{"half of smallest subnormal", 0x1p-25, 0x0000, "tie between 0 (even) and 2^-24: zero"},
		{"just above half of smallest subnormal", 0x1.000002p-25, 0x0001, "rounds up to 2^-24"},
		{"three halves of smallest subnormal", 0x3p-25, 0x0002, "tie between 1 and 2 units: even (2)"},
		{"negative tiny", -0x1p-30, 0x8000, "underflows to negative zero"},
		{"subnormal rounds to normal", 0x1.ffep-15, 0x0400, "largest subnormal + more than half an ulp rounds to 2^-14"},
		{"inf", float32(math.Inf(1)), 0x7c00, "kept"},
		{"NaN", float32(math.NaN()), 0x7fff, "canonical NaN"},
		{"negative NaN", math.Float32frombits(0xffa00000), 0x7fff, "canonical NaN whatever the sign"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Float32ToF16(tt.in), "%g: %s", tt.in, tt.why)
		})
	}
}

// TestFloat32ToNarrowRoundsMidpointsLikeTheOracle checks, for every pair of
// neighbouring finite encodings, the midpoint and the float32 values just
// either side of it: the places where rounding can go wrong.
func TestFloat32ToNarrowRoundsMidpointsLikeTheOracle(t *testing.T) {
	tests := []struct {
		f    format
		conv func(float32) uint16
	}{
		{fmtBF16, Float32ToBF16},
		{fmtF16, Float32ToF16},
	}
	for _, tt := range tests {
		t.Run(tt.f.name, func(t *testing.T) {
			o := newOracle(tt.f)
			top := o.inf(false)
			for c := uint16(0); c < top; c++ {
				for _, neg := range []bool{false, true} {
					lo, hi := c, c+1
					if neg {
						lo, hi = lo|0x8000, hi|0x8000
					}
					mid := (tt.f.decode(lo) + tt.f.decode(hi)) / 2
					m := float32(mid)
					require.Equal(t, mid, float64(m), "midpoint of %#04x must be exact in float32", lo)
					for _, x := range []float32{
						m,
						math.Nextafter32(m, float32(math.Inf(-1))),
						math.Nextafter32(m, float32(math.Inf(1))),
						float32(tt.f.decode(lo)),
					} {
						want := o.round(float64(x), 0)
						require.Equal(t, want, tt.conv(x), "%s of %g (%#08x)", tt.f.name, x, math.Float32bits(x))
					}
				}
			}
		})
	}
}

func TestFloat32ToNarrowMatchesOracleOnRandomFloats(t *testing.T) {
	n := 1_000_000
	if testing.Short() || raceEnabled {
		n = 100_000
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tt := range []struct {
		f    format
		conv func(float32) uint16
	}{
		{fmtBF16, Float32ToBF16},
		{fmtF16, Float32ToF16},
	} {
		t.Run(tt.f.name, func(t *testing.T) {
			o := newOracle(tt.f)
			for range n {
				x := math.Float32frombits(rng.Uint32())
				if tt.f.ebits == 5 {
					// Most random float32s are far out of fp16's range; keep
					// three quarters within it (exponents 2^-26 .. 2^17).
					if rng.IntN(4) != 0 {
						x = float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(44)-26))
						if rng.IntN(2) == 0 {
							x = -x
						}
					}
				}
				want := o.round(float64(x), 0)
				got := tt.conv(x)
				if math.IsNaN(float64(x)) {
					require.True(t, isNaNCode(tt.f, got), "%#08x", math.Float32bits(x))
					require.Equal(t, uint16(0x7fff), got)
					continue
				}
				require.Equal(t, want, got, "%s of %g (%#08x)", tt.f.name, x, math.Float32bits(x))
			}
		})
	}
}

func TestAddHandCheckedVectors(t *testing.T) {
	bf := func(f float32) uint16 { return uint16(math.Float32bits(f) >> 16) }
	tests := []struct {
		name           string
		add            func(dst, src []uint16) error
		dst, src, want uint16
		why            string
	}{
		{"bf16 one plus one", AddBF16, bf(1), bf(1), bf(2), "exact"},
		{"bf16 tie to even", AddBF16, bf(1), 0x3b80, 0x3f80, "1 + 2^-8 is halfway between 1 and 1+2^-7: even (1)"},
		{"bf16 tie to odd neighbour", AddBF16, 0x3f81, 0x3b80, 0x3f82, "1+2^-7 + 2^-8 is halfway between 0x3f81 and 0x3f82: even is 0x3f82"},
		{"bf16 sticky below tie", AddBF16, bf(1), 0x3b7f, 0x3f80, "slightly under half an ulp: down"},
		{"bf16 overflow", AddBF16, 0x7f7f, 0x7f7f, 0x7f80, "2 * max finite: +inf"},
		{"bf16 cancel to plus zero", AddBF16, bf(3), bf(-3), 0x0000, "x + -x is +0 in round to nearest"},
		{"bf16 zero signs", AddBF16, 0x8000, 0x8000, 0x8000, "-0 + -0 = -0"},
		{"bf16 mixed zero signs", AddBF16, 0x8000, 0x0000, 0x0000, "-0 + +0 = +0"},
		{"bf16 subnormals", AddBF16, 0x0001, 0x0001, 0x0002, "2^-133 + 2^-133, no flush to zero"},
		{"bf16 subnormals to normal", AddBF16, 0x0040, 0x0040, 0x0080, "2^-127 + 2^-127 = 2^-126, smallest normal"},
		{"bf16 inf minus inf", AddBF16, 0x7f80, 0xff80, 0x7fff, "invalid: canonical NaN"},
		{"bf16 inf plus finite", AddBF16, 0xff80, bf(1e30), 0xff80, "-inf stays"},
		{"bf16 NaN payload dropped", AddBF16, 0xffc1, bf(1), 0x7fff, "NaN input: canonical NaN out"},
		{"bf16 NaN in src", AddBF16, bf(1), 0x7f81, 0x7fff, "signalling NaN in src: canonical NaN"},
		{"fp16 one plus one", AddF16, 0x3c00, 0x3c00, 0x4000, "exact"},
		{"fp16 tie to even", AddF16, 0x3c00, 0x1000, 0x3c00, "1 + 2^-11: halfway to 1+2^-10, even (1) wins"},
		{"fp16 tie to odd neighbour", AddF16, 0x3c01, 0x1000, 0x3c02, "halfway between 0x3c01 and 0x3c02: even is 0x3c02"},
		{"fp16 overflow", AddF16, 0x7bff, 0x5000, 0x7c00, "65504 + 32 = 65536 beyond the 65520 midpoint: +inf"},
		{"fp16 overflow at the tie", AddF16, 0x7bff, 0x4c00, 0x7c00, "65504 + 16 = 65520, the midpoint to 65536: the even side is inf"},
		{"fp16 no overflow below the tie", AddF16, 0x7bff, 0x4800, 0x7bff, "65504 + 8 = 65512 is below the midpoint: stays"},
		{"fp16 subnormals", AddF16, 0x0001, 0x0001, 0x0002, "2^-24 + 2^-24"},
		{"fp16 inf minus inf", AddF16, 0x7c00, 0xfc00, 0x7fff, "canonical NaN"},
		{"fp16 zero signs", AddF16, 0x8000, 0x8000, 0x8000, "-0 + -0 = -0"},
		{"fp16 cancel", AddF16, 0x3c00, 0xbc00, 0x0000, "+0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []uint16{tt.dst}
			require.NoError(t, tt.add(dst, []uint16{tt.src}))
			assert.Equal(t, tt.want, dst[0], "%#04x + %#04x: %s", tt.dst, tt.src, tt.why)
		})
	}
}

func TestAddF32HandCheckedVectors(t *testing.T) {
	tests := []struct {
		name           string
		dst, src, want uint32
		why            string
	}{
		{"one plus one", 0x3f800000, 0x3f800000, 0x40000000, "exact"},
		{"tie to even", 0x3f800000, 0x33800000, 0x3f800000, "1 + 2^-24 halfway to 1+2^-23: even"},
		{"subnormals kept", 0x00000001, 0x00000001, 0x00000002, "no flush to zero"},
		{"overflow", 0x7f7fffff, 0x7f7fffff, 0x7f800000, "+inf"},
		{"zero signs", 0x80000000, 0x80000000, 0x80000000, "-0"},
		{"inf minus inf", 0x7f800000, 0xff800000, 0x7fffffff, "canonical NaN"},
		{"NaN payload dropped", 0xffc00123, 0x3f800000, 0x7fffffff, "canonical NaN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []float32{math.Float32frombits(tt.dst)}
			require.NoError(t, AddF32(dst, []float32{math.Float32frombits(tt.src)}))
			assert.Equal(t, tt.want, math.Float32bits(dst[0]), "%s", tt.why)
		})
	}
}

// randomPair returns two patterns of f: half the time independent uniform
// bit patterns, half the time operands with nearby exponents (where
// rounding and cancellation happen).
func randomPair(rng *rand.Rand, f format) (uint16, uint16) {
	a := uint16(rng.Uint32())
	if rng.IntN(2) == 0 {
		return a, uint16(rng.Uint32())
	}
	expMask := uint16(1<<f.ebits-1) << f.mbits
	exp := int(a&expMask>>f.mbits) + rng.IntN(2*f.mbits+5) - f.mbits - 2
	exp = min(max(exp, 0), 1<<f.ebits-1)
	b := uint16(rng.Uint32())&^expMask | uint16(exp)<<f.mbits
	return a, b
}

func TestAddMatchesFloat64ModelOnRandomPairs(t *testing.T) {
	n := 4_000_000
	if testing.Short() || raceEnabled {
		n = 200_000
	}
	for i, tt := range []struct {
		f   format
		add func(dst, src []uint16) error
	}{
		{fmtBF16, AddBF16},
		{fmtF16, AddF16},
	} {
		t.Run(tt.f.name, func(t *testing.T) {
			o := newOracle(tt.f)
			rng := rand.New(rand.NewPCG(3, uint64(i)))
			const batch = 4096
			dst := make([]uint16, batch)
			src := make([]uint16, batch)
			orig := make([]uint16, batch)
			for done := 0; done < n; done += batch {
				for j := range batch {
					dst[j], src[j] = randomPair(rng, tt.f)
				}
				copy(orig, dst)
				require.NoError(t, tt.add(dst, src))
				for j := range batch {
					s, tail := addExact(tt.f.decode(orig[j]), tt.f.decode(src[j]))
					want := o.round(s, tail)
					if dst[j] != want {
						require.Failf(t, "sum differs from the float64 model",
							"%s %#04x + %#04x: got %#04x, want %#04x", tt.f.name, orig[j], src[j], dst[j], want)
					}
				}
			}
		})
	}
}

func TestAddRejectsMismatchedLengths(t *testing.T) {
	tests := []struct {
		name string
		call func() error
	}{
		{"bf16", func() error { return AddBF16(make([]uint16, 3), make([]uint16, 4)) }},
		{"fp16", func() error { return AddF16(make([]uint16, 2), nil) }},
		{"fp32", func() error { return AddF32(nil, make([]float32, 1)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.ErrorIs(t, err, ErrLength)
			assert.Contains(t, err.Error(), tt.name)
		})
	}
}

func TestAddAcceptsEmptySlices(t *testing.T) {
	require.NoError(t, AddBF16(nil, nil))
	require.NoError(t, AddF16([]uint16{}, nil))
	require.NoError(t, AddF32(nil, []float32{}))
}
