// hostemu.cpp: runs add.cu's kernels on the CPU, for machines without a GPU
// (kernels/build.sh check builds it with g++ against the CUDA toolkit's
// headers). It is not the GPU: CUDA's host fallbacks stand in for the
// device's cvt instructions. What it checks:
//   1. layout: for every element offset of dst and src within 16 bytes,
//      lengths around the vector and block sizes and several grid shapes,
//      the grid-stride head/vector/tail loops touch each element of the
//      range exactly once (the result equals a plain scalar loop) and
//      nothing outside it;
//   2. arithmetic: with an output file argument, it writes the bf16 and
//      fp16 sums of every 16-bit pattern with every 257th pattern, which
//      TestKernelHostEmulationMatchesReference compares with the Go reference.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

// The CUDA built-ins add.cu uses, for the host.
struct Dim3 { unsigned x, y, z; };
static Dim3 emu_blockIdx, emu_threadIdx, emu_blockDim, emu_gridDim;
#define blockIdx emu_blockIdx
#define threadIdx emu_threadIdx
#define blockDim emu_blockDim
#define gridDim emu_gridDim
#undef __global__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(threads, blocks)
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { __nv_bfloat16_raw r; r.x = x; return r; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { __nv_bfloat16_raw r = h; return r.x; }
static inline __half __ushort_as_half(unsigned short x) { __half_raw r; r.x = x; return r; }
static inline unsigned short __half_as_ushort(__half h) { __half_raw r = h; return r.x; }

#include "../add.cu"

template <typename T>
static void launch(void (*kernel)(T *, const T *, size_t), void *dst, const void *src, size_t n,
                   unsigned grid, unsigned block) {
  emu_gridDim = {grid, 1, 1};
  emu_blockDim = {block, 1, 1};
  for (unsigned b = 0; b < grid; b++) {
    for (unsigned t = 0; t < block; t++) {
      emu_blockIdx = {b, 0, 0};
      emu_threadIdx = {t, 0, 0};
      kernel(static_cast<T *>(dst), static_cast<const T *>(src), n);
    }
  }
}

// scalar_add is the plain loop the kernels must agree with.
static void scalar_add(int kind, unsigned char *dst, const unsigned char *src, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (kind == 2) {
      float a, b;
      memcpy(&a, dst + 4 * i, 4);
      memcpy(&b, src + 4 * i, 4);
      a = F32::add(a, b);
      memcpy(dst + 4 * i, &a, 4);
      continue;
    }
    unsigned short a, b;
    memcpy(&a, dst + 2 * i, 2);
    memcpy(&b, src + 2 * i, 2);
    a = kind == 0 ? BF16::add(a, b) : F16::add(a, b);
    memcpy(dst + 2 * i, &a, 2);
  }
}

static int check_layout() {
  static const char *names[] = {"bf16", "fp16", "fp32"};
  const size_t lengths[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 255, 256, 257, 2047, 2048, 2049, 4097, 10003};
  const unsigned grids[][2] = {{1, 1}, {1, 3}, {2, 4}, {1, 256}, {3, 256}, {40, 256}};
  std::mt19937_64 rng(1);
  long runs = 0;
  for (int kind = 0; kind < 3; kind++) {
    const size_t es = kind == 2 ? 4 : 2, per = 16 / es;
    for (size_t doff = 0; doff < per; doff++) {
      for (size_t soff = 0; soff < per; soff++) {
        for (size_t n : lengths) {
          for (const auto &g : grids) {
            // uint4 storage: 16-byte aligned bases, then the element offsets.
            const size_t words = (n + 2 * per) * es / 16 + 2;
            std::vector<uint4> dbuf(words), sbuf(words);
            for (auto &w : dbuf) w = {unsigned(rng()), unsigned(rng()), unsigned(rng()), unsigned(rng())};
            for (auto &w : sbuf) w = {unsigned(rng()), unsigned(rng()), unsigned(rng()), unsigned(rng())};
            std::vector<uint4> want = dbuf;
            unsigned char *d = reinterpret_cast<unsigned char *>(dbuf.data()) + doff * es;
            unsigned char *s = reinterpret_cast<unsigned char *>(sbuf.data()) + soff * es;
            scalar_add(kind, reinterpret_cast<unsigned char *>(want.data()) + doff * es, s, n);
            if (kind == 0) launch(ncclgo_add_bf16, d, s, n, g[0], g[1]);
            if (kind == 1) launch(ncclgo_add_f16, d, s, n, g[0], g[1]);
            if (kind == 2) launch(ncclgo_add_f32, d, s, n, g[0], g[1]);
            if (memcmp(dbuf.data(), want.data(), words * sizeof(uint4)) != 0) {
              fprintf(stderr, "hostemu: %s: dst offset %zu, src offset %zu, n %zu, grid %u x %u: result differs from the scalar loop\n",
                      names[kind], doff, soff, n, g[0], g[1]);
              return 1;
            }
            runs++;
          }
        }
      }
    }
  }
  fprintf(stderr, "hostemu: layout ok (%ld launches)\n", runs);
  return 0;
}

static int dump_arithmetic(const char *path) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    return 1;
  }
  std::vector<unsigned short> row;
  for (unsigned a = 0; a < 65536; a++) {
    row.clear();
    for (unsigned b = 0; b < 65536; b += 257) {
      row.push_back(BF16::add(a, b));
      row.push_back(F16::add(a, b));
    }
    fwrite(row.data(), sizeof(unsigned short), row.size(), f);
  }
  return fclose(f) == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (check_layout() != 0) return 1;
  return argc > 1 ? dump_arithmetic(argv[1]) : 0;
}
