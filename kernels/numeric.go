package kernels

import (
	"errors"
	"fmt"
	"math"
)

// ErrLength reports that two slices given to an add reference, or a buffer
// given to a launch helper, do not have the lengths the operation needs.
var ErrLength = errors.New("length mismatch")

// Canonical NaN encodings. The GPU's float32 arithmetic returns this NaN for
// every NaN result whatever the inputs' payloads, and converting it to
// bf16 or fp16 gives the 16-bit canonical NaN, so the add kernels (and the
// add references below) store these patterns for every NaN result.
const (
	CanonicalNaNF32  uint32 = 0x7fffffff
	CanonicalNaNBF16 uint16 = 0x7fff
	CanonicalNaNF16  uint16 = 0x7fff
)

// BF16ToFloat32 returns the float32 value of the bfloat16 bit pattern b.
// The conversion is exact: bfloat16 is the upper half of a float32, so NaN
// payloads, infinities, signed zeros and subnormals are kept as they are.
func BF16ToFloat32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// Float32ToBF16 rounds f to the nearest bfloat16, ties to even, as CUDA's
// __float2bfloat16_rn does on the device (cvt.rn.bf16.f32). Finite values
// beyond the largest bfloat16 round to infinity, infinities and signed
// zeros are kept, and results below the smallest normal become subnormals
// (no flush to zero). Any NaN becomes the canonical NaN 0x7fff, as CUDA's
// own host implementation of __float2bfloat16_rn gives.
func Float32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return CanonicalNaNBF16
	}
	// bfloat16 shares float32's exponent, so rounding the low 16 bits to
	// nearest even is the whole conversion; a carry ripples into the
	// exponent, up to infinity, as it should.
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// F16ToFloat32 returns the float32 value of the IEEE binary16 bit pattern h.
// The conversion is exact. A NaN keeps its sign and payload (shifted into
// the top of the float32 fraction).
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	case exp != 0:
		return math.Float32frombits(sign | (uint32(h&0x7fff)<<13 + (127-15)<<23))
	case frac == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: frac * 2^-24, exact in float32.
	v := float32(frac) * 0x1p-24
	return math.Float32frombits(sign | math.Float32bits(v))
}

// Float32ToF16 rounds f to the nearest IEEE binary16, ties to even, as
// CUDA's __float2half_rn does: finite values that round beyond 65504
// become infinity, small values become subnormals or signed zero, and any
// NaN becomes the canonical NaN 0x7fff.
func Float32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	a := u & 0x7fffffff
	switch {
	case a > 0x7f800000:
		return CanonicalNaNF16
	case a == 0x7f800000:
		return sign | 0x7c00
	}
	if a >= 0x477ff000 { // 65520, halfway from 65504 to 2^16, and above: infinity
		return sign | 0x7c00
	}
	if a >= 0x38800000 { // 2^-14 and above: normal, rebias and round the low 13 bits
		a += 0xfff + (a>>13)&1
		return sign | uint16((a-(127-15)<<23)>>13)
	}
	return sign | uint16(roundMagnitude(a, 10, 15))
}

// E4M3ToFloat32 returns the float32 value of the FP8 E4M3 (OCP "E4M3FN")
// bit pattern b: 4 exponent bits with bias 7, 3 fraction bits, no
// infinities, S.1111.111 is NaN, largest finite value 448.
func E4M3ToFloat32(b uint8) float32 {
	if b&0x7f == 0x7f {
		return fromSignMagnitude(b&0x80 != 0, float32(math.NaN()))
	}
	return decodeSmall(b, 3, 7)
}

// Float32ToE4M3 converts f to FP8 E4M3 as CUDA's
// __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3) does: round to
// nearest even, subnormals kept, finite values and infinities beyond the
// range saturate to ±448 (0x7e / 0xfe), and any NaN becomes 0x7f (CUDA
// canonicalizes the NaN first, so its sign is not kept).
func Float32ToE4M3(f float32) uint8 {
	u := math.Float32bits(f)
	sign := uint8(u>>24) & 0x80
	a := u & 0x7fffffff
	if a > 0x7f800000 {
		return 0x7f
	}
	code := roundMagnitude(min(a, 0x7f7fffff), 3, 7)
	return sign | uint8(min(code, 0x7e))
}

// E5M2ToFloat32 returns the float32 value of the FP8 E5M2 bit pattern b:
// 5 exponent bits with bias 15, 2 fraction bits, IEEE-like infinities
// (0x7c) and NaNs, largest finite value 57344.
func E5M2ToFloat32(b uint8) float32 {
	switch {
	case b&0x7f == 0x7c:
		return fromSignMagnitude(b&0x80 != 0, float32(math.Inf(1)))
	case b&0x7f > 0x7c:
		return fromSignMagnitude(b&0x80 != 0, float32(math.NaN()))
	}
	return decodeSmall(b, 2, 15)
}

// Float32ToE5M2 converts f to FP8 E5M2 as CUDA's
// __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2) does: round to
// nearest even, subnormals kept, finite values and infinities beyond the
// range saturate to ±57344 (0x7b / 0xfb), and any NaN becomes 0x7f (its
// sign is not kept).
func Float32ToE5M2(f float32) uint8 {
	u := math.Float32bits(f)
	sign := uint8(u>>24) & 0x80
	a := u & 0x7fffffff
	if a > 0x7f800000 {
		return 0x7f
	}
	code := roundMagnitude(min(a, 0x7f7fffff), 2, 15)
	return sign | uint8(min(code, 0x7b))
}

// AddBF16 adds src to dst element by element, in place, exactly as the
// bf16 add kernel does: both operands are widened to float32, added in
// float32 and the sum rounded once to bfloat16, ties to even. (float32 has
// more than twice bfloat16's precision plus two bits, so this equals the
// exactly rounded sum.) A NaN result is stored as the canonical NaN 0x7fff.
// It returns an error wrapping ErrLength if the slices differ in length.
func AddBF16(dst, src []uint16) error {
	if len(dst) != len(src) {
		return lengthError("bf16", len(dst), len(src))
	}
	for i, s := range src {
		sum := BF16ToFloat32(dst[i]) + BF16ToFloat32(s)
		if sum != sum {
			dst[i] = CanonicalNaNBF16
			continue
		}
		dst[i] = Float32ToBF16(sum)
	}
	return nil
}

// AddF16 adds src to dst element by element, in place, exactly as the fp16
// add kernel does: widened to float32, added, rounded once to binary16,
// ties to even (again equal to the exactly rounded sum). A NaN result is
// stored as the canonical NaN 0x7fff. It returns an error wrapping
// ErrLength if the slices differ in length.
func AddF16(dst, src []uint16) error {
	if len(dst) != len(src) {
		return lengthError("fp16", len(dst), len(src))
	}
	for i, s := range src {
		sum := F16ToFloat32(dst[i]) + F16ToFloat32(s)
		if sum != sum {
			dst[i] = CanonicalNaNF16
			continue
		}
		dst[i] = Float32ToF16(sum)
	}
	return nil
}

// AddF32 adds src to dst element by element, in place, as the fp32 add
// kernel does (IEEE float32 addition, round to nearest even, subnormals
// kept). A NaN result is stored as the canonical NaN 0x7fffffff. It
// returns an error wrapping ErrLength if the slices differ in length.
func AddF32(dst, src []float32) error {
	if len(dst) != len(src) {
		return lengthError("fp32", len(dst), len(src))
	}
	for i, s := range src {
		sum := dst[i] + s
		if sum != sum {
			sum = math.Float32frombits(CanonicalNaNF32)
		}
		dst[i] = sum
	}
	return nil
}

func lengthError(kind string, dst, src int) error {
	return fmt.Errorf("%s add: dst has %d elements, src has %d: %w", kind, dst, src, ErrLength)
}

// roundMagnitude rounds the finite, non-negative float32 bit pattern a to
// nearest even in a binary format with mbits fraction bits and exponent
// bias bias, subnormals included, and returns that format's magnitude
// encoding (exponent and fraction fields). The result may lie beyond the
// format's largest finite encoding; the caller decides what overflow gives.
func roundMagnitude(a uint32, mbits, bias int) uint32 {
	e := int(a >> 23)
	m := a & 0x7fffff
	if e == 0 {
		e = 1 // float32 subnormal: same scale as the smallest normal
	} else {
		m |= 0x800000
	}
	// a's value is m * 2^(e-150); its unbiased exponent is at most e-127.
	// The target's unit in the last place is 2^(max(e-127, 1-bias) - mbits).
	exp := max(e-127, 1-bias)
	shift := exp - mbits - (e - 150)
	var q uint32
	switch {
	case shift <= 0:
		q = m << uint(-shift)
	case shift >= 32:
		q = 0
	default:
		q = m >> uint(shift)
		rem := m & (1<<uint(shift) - 1)
		half := uint32(1) << uint(shift-1)
		if rem > half || rem == half && q&1 == 1 {
			q++
		}
	}
	// For normal results q holds the hidden bit, which adds one to the
	// exponent field; subnormals have exp == 1-bias and a zero field. A
	// carry out of the fraction moves into the exponent by the addition.
	return uint32(exp+bias-1)<<uint(mbits) + q
}

// decodeSmall decodes a finite FP8 pattern with mbits fraction bits and the
// given exponent bias.
func decodeSmall(b uint8, mbits, bias int) float32 {
	mag := int(b & 0x7f)
	exp := mag >> mbits
	frac := mag & (1<<mbits - 1)
	var v float32
	if exp == 0 {
		v = float32(math.Ldexp(float64(frac), 1-bias-mbits))
	} else {
		v = float32(math.Ldexp(float64(frac|1<<mbits), exp-bias-mbits))
	}
	return fromSignMagnitude(b&0x80 != 0, v)
}

func fromSignMagnitude(negative bool, v float32) float32 {
	if negative {
		return math.Float32frombits(math.Float32bits(v) | 0x80000000)
	}
	return v
}
