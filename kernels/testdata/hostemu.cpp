// hostemu.cpp: runs add.cu's kernels on the CPU, for machines without a GPU.
// TestKernelHostEmulationMatchesReference (kernels/hostemu_test.go) builds it
// with g++ against the CUDA 12.4 cuda_bf16.h/cuda_fp16.h (and what they
// include, among them libcu++'s <nv/target>) that `make kernel-inputs`
// caches. It is not the GPU: CUDA's host fallbacks stand in for the device's
// cvt instructions, and the host's IEEE float addition (SSE, no flush to
// zero) for the device's add.rn.f32.
//
//   hostemu bf16|fp16|fp32
//
// reads jobs from stdin until it ends and answers each on stdout. A job is
// six little-endian uint64 (doff, soff, n, total, grid, block), then total
// dst elements and total src elements. hostemu copies each buffer to a
// 16-byte boundary, launches the kernel on dst+doff and src+soff for n
// elements with grid blocks of block threads (every thread of the grid in
// turn), and writes back all total elements of dst, so that the Go test
// sees both the sums and whatever the kernel touched outside the range.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// The CUDA built-ins add.cu uses that CUDA 12.4's headers do not declare
// for the host. (uint4 and the 16-bit bit casts they declare themselves.)
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
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }

#include "../add.cu"

static_assert(sizeof(uint4) == 16 && alignof(uint4) == 16, "uint4 must be the 16-byte vector type");

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

// run launches the kernel of kind (0 bf16, 1 fp16, 2 fp32).
static void run(int kind, void *dst, const void *src, size_t n, unsigned grid, unsigned block) {
  if (kind == 0) launch(ncclgo_add_bf16, dst, src, n, grid, block);
  if (kind == 1) launch(ncclgo_add_f16, dst, src, n, grid, block);
  if (kind == 2) launch(ncclgo_add_f32, dst, src, n, grid, block);
}

static size_t elem_size(int kind) { return kind == 2 ? 4 : 2; }

static const char *names[] = {"bf16", "fp16", "fp32"};

static bool read_all(void *p, size_t size) { return size == 0 || fread(p, 1, size, stdin) == size; }

// job runs one job; it returns 0 on success, 1 at the end of stdin, 2 on
// an error (reported on stderr).
static int job(int kind, long index) {
  const size_t es = elem_size(kind);
  unsigned char head[48];
  const size_t got = fread(head, 1, sizeof head, stdin);
  if (got == 0 && feof(stdin)) return 1;
  if (got != sizeof head) {
    fprintf(stderr, "hostemu: %s job %ld: header cut short (%zu of %zu bytes)\n", names[kind], index, got, sizeof head);
    return 2;
  }
  uint64_t v[6];
  for (int f = 0; f < 6; f++) {
    v[f] = 0;
    for (int i = 7; i >= 0; i--) v[f] = v[f] << 8 | head[8 * f + i];
  }
  const uint64_t doff = v[0], soff = v[1], n = v[2], total = v[3], grid = v[4], block = v[5];
  if (total > (uint64_t(1) << 31) || doff > total || soff > total || n > total - doff || n > total - soff ||
      grid == 0 || grid > 65535 || block == 0 || block > NCCLGO_ADD_BLOCK) {
    fprintf(stderr, "hostemu: %s job %ld: bad job doff %llu soff %llu n %llu total %llu grid %llu block %llu\n",
            names[kind], index, (unsigned long long)doff, (unsigned long long)soff, (unsigned long long)n,
            (unsigned long long)total, (unsigned long long)grid, (unsigned long long)block);
    return 2;
  }
  const size_t words = (total * es + 15) / 16 + 1;
  std::vector<uint4> dbuf(words), sbuf(words);
  unsigned char *d = reinterpret_cast<unsigned char *>(dbuf.data());
  unsigned char *s = reinterpret_cast<unsigned char *>(sbuf.data());
  if (!read_all(d, total * es) || !read_all(s, total * es)) {
    fprintf(stderr, "hostemu: %s job %ld: stdin ended before %llu dst and src elements\n", names[kind], index,
            (unsigned long long)total);
    return 2;
  }
  run(kind, d + doff * es, s + soff * es, n, unsigned(grid), unsigned(block));
  if (fwrite(d, 1, total * es, stdout) != total * es) {
    perror("hostemu: stdout");
    return 2;
  }
  return 0;
}

int main(int argc, char **argv) {
  for (int kind = 0; argc == 2 && kind < 3; kind++) {
    if (names[kind] != std::string(argv[1])) continue;
    long index = 0;
    for (;; index++) {
      const int r = job(kind, index);
      if (r == 1) break;
      if (r != 0) return 1;
    }
    if (fflush(stdout) != 0) {
      perror("hostemu: stdout");
      return 1;
    }
    return 0;
  }
  fprintf(stderr, "usage: hostemu bf16|fp16|fp32 < jobs > results\n");
  return 2;
}
