//go:build cgo

package mpi

/*
#include <stdint.h>
#include <string.h>
#include <math.h>

// Reductions of the element types MPI 4.1 has no datatype for (float16, bfloat16 and the
// two fp8 formats), as MPI user functions (MPI_User_function: invec, inoutvec, len,
// datatype). Each element is widened to float32, combined in float32 and rounded once
// back, ties to even, with the same conversions, NaN and signed-zero rules as the Go
// reference in package kernels and the simulator (x86-64 float arithmetic is IEEE
// binary32 without excess precision). The datatype argument (an Open MPI handle) is not
// read: every function serves one element format.

enum { F_F16, F_BF16, F_E4M3, F_E5M2 };
enum { O_SUM, O_PROD, O_MAX, O_MIN };

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

// round_magnitude is kernels.roundMagnitude.
static uint32_t round_magnitude(uint32_t a, int mbits, int bias) {
	int e = (int)(a >> 23);
	uint32_t m = a & 0x7fffff;
	if (e == 0) e = 1; else m |= 0x800000;
	int exp = e - 127 > 1 - bias ? e - 127 : 1 - bias;
	int shift = exp - mbits - (e - 150);
	uint32_t q;
	if (shift <= 0) {
		q = m << (unsigned)(-shift);
	} else if (shift >= 32) {
		q = 0;
	} else {
		q = m >> (unsigned)shift;
		uint32_t rem = m & ((1u << (unsigned)shift) - 1);
		uint32_t half = 1u << (unsigned)(shift - 1);
		if (rem > half || (rem == half && (q & 1))) q++;
	}
	return ((uint32_t)(exp + bias - 1) << (unsigned)mbits) + q;
}

static float small_decode(uint8_t b, int mbits, int bias) {
	int mag = b & 0x7f, exp = mag >> mbits, frac = mag & ((1 << mbits) - 1);
	float v = exp == 0 ? ldexpf((float)frac, 1 - bias - mbits) : ldexpf((float)(frac | (1 << mbits)), exp - bias - mbits);
	return (b & 0x80) ? u2f(f2u(v) | 0x80000000u) : v;
}

static float dec(int f, uint16_t c) {
	switch (f) {
	case F_BF16:
		return u2f((uint32_t)c << 16);
	case F_F16: {
		uint32_t sign = (uint32_t)(c & 0x8000) << 16, exp = (c >> 10) & 0x1f, frac = c & 0x3ff;
		if (exp == 0x1f) return u2f(sign | 0x7f800000u | frac << 13);
		if (exp != 0) return u2f(sign | ((uint32_t)(c & 0x7fff) << 13) + ((127 - 15) << 23));
		if (frac == 0) return u2f(sign);
		return u2f(sign | f2u((float)frac * 0x1p-24f));
	}
	case F_E4M3:
		if ((c & 0x7f) == 0x7f) return u2f((c & 0x80 ? 0x80000000u : 0) | 0x7fc00000u);
		return small_decode((uint8_t)c, 3, 7);
	}
	if ((c & 0x7f) == 0x7c) return u2f((c & 0x80 ? 0x80000000u : 0) | 0x7f800000u);
	if ((c & 0x7f) > 0x7c) return u2f((c & 0x80 ? 0x80000000u : 0) | 0x7fc00000u);
	return small_decode((uint8_t)c, 2, 15);
}

static uint16_t enc(int f, float v) {
	uint32_t u = f2u(v), a = u & 0x7fffffffu;
	switch (f) {
	case F_BF16:
		if (a > 0x7f800000u) return 0x7fff;
		u += 0x7fff + ((u >> 16) & 1);
		return (uint16_t)(u >> 16);
	case F_F16: {
		uint16_t sign = (uint16_t)(u >> 16) & 0x8000;
		if (a > 0x7f800000u) return 0x7fff;
		if (a == 0x7f800000u || a >= 0x477ff000u) return sign | 0x7c00;
		if (a >= 0x38800000u) {
			a += 0xfff + ((a >> 13) & 1);
			return sign | (uint16_t)((a - ((uint32_t)(127 - 15) << 23)) >> 13);
		}
		return sign | (uint16_t)round_magnitude(a, 10, 15);
	}
	case F_E4M3: {
		uint8_t sign = (uint8_t)(u >> 24) & 0x80;
		if (a > 0x7f800000u) return 0x7f;
		uint32_t code = round_magnitude(a < 0x7f7fffffu ? a : 0x7f7fffffu, 3, 7);
		return sign | (uint8_t)(code < 0x7e ? code : 0x7e);
	}
	}
	uint8_t sign = (uint8_t)(u >> 24) & 0x80;
	if (a > 0x7f800000u) return 0x7f;
	uint32_t code = round_magnitude(a < 0x7f7fffffu ? a : 0x7f7fffffu, 2, 15);
	return sign | (uint8_t)(code < 0x7b ? code : 0x7b);
}

// fmax and fmin as the simulator's: a NaN operand is ignored; +0 is above -0.
static float apply(int op, float a, float b) {
	switch (op) {
	case O_PROD:
		return a * b;
	case O_MAX:
		if (a != a) return b;
		if (b != b) return a;
		if (a > b || (a == b && !signbit(a))) return a;
		return b;
	case O_MIN:
		if (a != a) return b;
		if (b != b) return a;
		if (a < b || (a == b && signbit(a))) return a;
		return b;
	}
	return a + b;
}

static void combine(int f, int op, void *in, void *inout, int n) {
	if (f == F_F16 || f == F_BF16) {
		const uint16_t *x = in; uint16_t *y = inout;
		for (int i = 0; i < n; i++) y[i] = enc(f, apply(op, dec(f, x[i]), dec(f, y[i])));
		return;
	}
	const uint8_t *x = in; uint8_t *y = inout;
	for (int i = 0; i < n; i++) y[i] = (uint8_t)enc(f, apply(op, dec(f, x[i]), dec(f, y[i])));
}

#define NCCLGO_OP(F, O) \
	static void ncclgo_op_##F##_##O(void *in, void *inout, int *len, void *dt) { (void)dt; combine(F, O, in, inout, *len); }
#define NCCLGO_OPS(F) NCCLGO_OP(F, O_SUM) NCCLGO_OP(F, O_PROD) NCCLGO_OP(F, O_MAX) NCCLGO_OP(F, O_MIN)
NCCLGO_OPS(F_F16)
NCCLGO_OPS(F_BF16)
NCCLGO_OPS(F_E4M3)
NCCLGO_OPS(F_E5M2)

typedef void (*ncclgo_user_fn)(void *, void *, int *, void *);
#define NCCLGO_ROW(F) { ncclgo_op_##F##_O_SUM, ncclgo_op_##F##_O_PROD, ncclgo_op_##F##_O_MAX, ncclgo_op_##F##_O_MIN }
static const ncclgo_user_fn ncclgo_ops[4][4] = { NCCLGO_ROW(F_F16), NCCLGO_ROW(F_BF16), NCCLGO_ROW(F_E4M3), NCCLGO_ROW(F_E5M2) };

static uintptr_t ncclgo_op_addr(int f, int op) { return (uintptr_t)ncclgo_ops[f][op]; }

// Integer sums and products wrapping around as NCCL's do (two's complement, computed on
// the unsigned type of the width so that no overflow is undefined): Open MPI's AVX
// component saturates 8-bit sums from 16 elements. Float32 and float64 maxima and
// minima with the narrow formats' rule (apply): a NaN operand is ignored and -0 is below
// +0, whatever the order of the operands.
#define NCCLGO_WRAP(T, W) \
	static void ncclgo_sum_##W(void *in, void *inout, int *len, void *dt) { (void)dt; const T *x = in; T *y = inout; for (int i = 0; i < *len; i++) y[i] = (T)(x[i] + y[i]); } \
	static void ncclgo_prod_##W(void *in, void *inout, int *len, void *dt) { (void)dt; const T *x = in; T *y = inout; for (int i = 0; i < *len; i++) y[i] = (T)((T)x[i] * (T)y[i]); }
NCCLGO_WRAP(uint8_t, 8)
NCCLGO_WRAP(uint32_t, 32)
NCCLGO_WRAP(uint64_t, 64)

static double apply_d(int op, double a, double b) {
	if (a != a) return b;
	if (b != b) return a;
	if (op == O_MAX) return (a > b || (a == b && !signbit(a))) ? a : b;
	return (a < b || (a == b && signbit(a))) ? a : b;
}
static void ncclgo_max_f32(void *in, void *inout, int *len, void *dt) { (void)dt; const float *x = in; float *y = inout; for (int i = 0; i < *len; i++) y[i] = apply(O_MAX, x[i], y[i]); }
static void ncclgo_min_f32(void *in, void *inout, int *len, void *dt) { (void)dt; const float *x = in; float *y = inout; for (int i = 0; i < *len; i++) y[i] = apply(O_MIN, x[i], y[i]); }
static void ncclgo_max_f64(void *in, void *inout, int *len, void *dt) { (void)dt; const double *x = in; double *y = inout; for (int i = 0; i < *len; i++) y[i] = apply_d(O_MAX, x[i], y[i]); }
static void ncclgo_min_f64(void *in, void *inout, int *len, void *dt) { (void)dt; const double *x = in; double *y = inout; for (int i = 0; i < *len; i++) y[i] = apply_d(O_MIN, x[i], y[i]); }

// ncclgo_wide_op_addr is the user function for elements of width bytes (1, 4, 8: the
// integers; 4, 8 with fl: float32, float64) and op, or 0 where MPI's own operator serves.
static uintptr_t ncclgo_wide_op_addr(int width, int fl, int op) {
	if (fl) {
		if (op == O_MAX) return (uintptr_t)(width == 4 ? ncclgo_max_f32 : ncclgo_max_f64);
		if (op == O_MIN) return (uintptr_t)(width == 4 ? ncclgo_min_f32 : ncclgo_min_f64);
		return 0;
	}
	if (op == O_SUM) return (uintptr_t)(width == 1 ? ncclgo_sum_8 : width == 4 ? ncclgo_sum_32 : ncclgo_sum_64);
	if (op == O_PROD) return (uintptr_t)(width == 1 ? ncclgo_prod_8 : width == 4 ? ncclgo_prod_32 : ncclgo_prod_64);
	return 0;
}
static void ncclgo_op_call(int f, int op, void *in, void *inout, int n) { int len = n; ncclgo_ops[f][op](in, inout, &len, 0); }
*/
import "C"

import "unsafe"

// mpiNarrowOp returns the address of the C MPI_User_function reducing elements of format
// f (mpiF16 ...) with op (mpiOpSum ...).
func mpiNarrowOp(f, op int) uintptr { return uintptr(C.ncclgo_op_addr(C.int(f), C.int(op))) }

// mpiWideOp returns the address of the C MPI_User_function for elements of width bytes
// (floating or integer) with op (mpiOpSum ...), or 0 where MPI's predefined operator
// gives NCCL's result.
func mpiWideOp(width int, floating bool, op int) uintptr {
	fl := 0
	if floating {
		fl = 1
	}
	return uintptr(C.ncclgo_wide_op_addr(C.int(width), C.int(fl), C.int(op)))
}

// mpiCombine applies the user function of (f, op) to n elements: inout = in op inout.
// The tests compare it with the Go reference.
func mpiCombine(f, op int, in, inout unsafe.Pointer, n int) {
	C.ncclgo_op_call(C.int(f), C.int(op), in, inout, C.int(n))
}
