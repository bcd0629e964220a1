// In-place element-wise add kernels of ncclgo: dst[i] += src[i], i < n.
//
// kernels/build.sh compiles this file to add.ptx (nvcc -ptx
// -arch=compute_80); the Go package embeds that PTX and the CUDA driver
// JIT-compiles it for the GPU at hand. The Go reference of the arithmetic
// is kernels/numeric.go (AddBF16, AddF16, AddF32): both must store the same
// bits for every input.
//
// Entry points (extern "C", so their PTX names are these names):
//   ncclgo_add_bf16(uint16_t *dst, const uint16_t *src, size_t n)
//   ncclgo_add_f16 (uint16_t *dst, const uint16_t *src, size_t n)
//   ncclgo_add_f32 (float *dst, const float *src, size_t n)
// n counts elements. dst and src must be aligned to the element size and
// must not overlap (they are declared __restrict__). Launch with NCCLGO_ADD_BLOCK threads
// per block and any grid size (kernels.LaunchDims picks one).
//
// Arithmetic: bf16 and fp16 are widened to float32, added and rounded once
// to nearest even (float32 holds more than twice their precision plus two
// bits, so that equals the exactly rounded sum); subnormals are kept (no
// -ftz); every NaN result is stored as the canonical NaN (0x7fff for 16-bit
// types, 0x7fffffff for float32), whatever the inputs' payloads.
//
// Memory: when dst and src have the same address modulo 16, a scalar head
// brings dst to a 16-byte boundary, the body moves 16 bytes per load and
// store (uint4), and a scalar tail finishes; otherwise every element is
// handled with scalar loads. All loops are grid-stride loops.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>

// 6 blocks of 256 threads per SM: 1536 threads, the most an SM holds on
// compute capability 8.6, 8.7 and 8.9 (8.0 and 9.0 hold 2048). With 8, ptxas
// rejects the launch bound for those GPUs (and the driver ignores it).
#define NCCLGO_ADD_BLOCK 256
#define NCCLGO_ADD_MIN_BLOCKS_PER_SM 6

namespace {

__device__ __forceinline__ float sum_f32(float a, float b) {
  return __fadd_rn(a, b);
}

struct F32 {
  typedef float T;
  static __device__ __forceinline__ float add(float a, float b) {
    float s = sum_f32(a, b);
    return s != s ? __int_as_float(0x7fffffff) : s;
  }
  static __device__ __forceinline__ unsigned int add_word(unsigned int a, unsigned int b) {
    return __float_as_uint(add(__uint_as_float(a), __uint_as_float(b)));
  }
};

struct BF16 {
  typedef unsigned short T;
  static __device__ __forceinline__ unsigned short add(unsigned short a, unsigned short b) {
    float s = sum_f32(__bfloat162float(__ushort_as_bfloat16(a)),
                      __bfloat162float(__ushort_as_bfloat16(b)));
    const unsigned short r = __bfloat16_as_ushort(__float2bfloat16_rn(s));
    return s != s ? (unsigned short)0x7fff : r;
  }
  // add_word adds the two 16-bit elements packed in a 32-bit word.
  static __device__ __forceinline__ unsigned int add_word(unsigned int a, unsigned int b) {
    unsigned int lo = add((unsigned short)(a & 0xffffu), (unsigned short)(b & 0xffffu));
    unsigned int hi = add((unsigned short)(a >> 16), (unsigned short)(b >> 16));
    return lo | (hi << 16);
  }
};

struct F16 {
  typedef unsigned short T;
  static __device__ __forceinline__ unsigned short add(unsigned short a, unsigned short b) {
    float s = sum_f32(__half2float(__ushort_as_half(a)), __half2float(__ushort_as_half(b)));
    const unsigned short r = __half_as_ushort(__float2half_rn(s));
    return s != s ? (unsigned short)0x7fff : r;
  }
  static __device__ __forceinline__ unsigned int add_word(unsigned int a, unsigned int b) {
    unsigned int lo = add((unsigned short)(a & 0xffffu), (unsigned short)(b & 0xffffu));
    unsigned int hi = add((unsigned short)(a >> 16), (unsigned short)(b >> 16));
    return lo | (hi << 16);
  }
};

template <typename Op>
__device__ __forceinline__ void add_inplace(typename Op::T *__restrict__ dst,
                                            const typename Op::T *__restrict__ src,
                                            size_t n) {
  typedef typename Op::T T;
  const size_t per_vec = sizeof(uint4) / sizeof(T);
  const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const uintptr_t d = (uintptr_t)dst;

  if (((d ^ (uintptr_t)src) & 15) != 0) {
    // Different misalignment: no common 16-byte boundary, scalar only.
    for (size_t i = first; i < n; i += stride) {
      dst[i] = Op::add(dst[i], src[i]);
    }
    return;
  }

  size_t head = ((16 - (d & 15)) & 15) / sizeof(T);
  if (head > n) {
    head = n;
  }
  const size_t nvec = (n - head) / per_vec;
  uint4 *__restrict__ dv = reinterpret_cast<uint4 *>(dst + head);
  const uint4 *__restrict__ sv = reinterpret_cast<const uint4 *>(src + head);
  for (size_t v = first; v < nvec; v += stride) {
    uint4 a = dv[v];
    const uint4 b = sv[v];
    a.x = Op::add_word(a.x, b.x);
    a.y = Op::add_word(a.y, b.y);
    a.z = Op::add_word(a.z, b.z);
    a.w = Op::add_word(a.w, b.w);
    dv[v] = a;
  }
  for (size_t i = first; i < head; i += stride) {
    dst[i] = Op::add(dst[i], src[i]);
  }
  for (size_t i = head + nvec * per_vec + first; i < n; i += stride) {
    dst[i] = Op::add(dst[i], src[i]);
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(NCCLGO_ADD_BLOCK, NCCLGO_ADD_MIN_BLOCKS_PER_SM)
ncclgo_add_bf16(unsigned short *__restrict__ dst, const unsigned short *__restrict__ src, size_t n) {
  add_inplace<BF16>(dst, src, n);
}

extern "C" __global__ void __launch_bounds__(NCCLGO_ADD_BLOCK, NCCLGO_ADD_MIN_BLOCKS_PER_SM)
ncclgo_add_f16(unsigned short *__restrict__ dst, const unsigned short *__restrict__ src, size_t n) {
  add_inplace<F16>(dst, src, n);
}

extern "C" __global__ void __launch_bounds__(NCCLGO_ADD_BLOCK, NCCLGO_ADD_MIN_BLOCKS_PER_SM)
ncclgo_add_f32(float *__restrict__ dst, const float *__restrict__ src, size_t n) {
  add_inplace<F32>(dst, src, n);
}
