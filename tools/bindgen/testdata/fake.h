/* A small header in the shape of nccl.h and cuda.h, for the generator's tests. */
#ifndef FAKE_H
#define FAKE_H
#include <stddef.h>
#include <stdint.h>

#define FAKE_MAJOR 1
#define FAKE_BIG 0xcafebeef
#define FAKE_LABEL "fake"
#define FAKE_HALF 0.5f
#define FAKE_NULL ((void *)0)
#define FAKE_UNDEF_INT INT32_MIN
#define fakeOpen fakeOpen_v2

typedef struct fakeHandle_st *fakeHandle_t;
typedef enum { fakeOk = 0, fakeBad = 1, fakeNeg = -1 } fakeResult_t;
typedef struct { char bytes[16]; } fakeId;
typedef struct fakeDesc_st {
  const char *name;
  int count;
  union { uint32_t u32; uint64_t u64; } value;
  struct { short a; short b; };
  double scale;
} fakeDesc_v1;
typedef fakeDesc_v1 fakeDesc;
typedef void (*fakeCallback)(void *userData);
#define FAKE_STREAM_LEGACY ((fakeHandle_t)0x1)

fakeResult_t fakeOpen(fakeHandle_t *h, const fakeDesc *desc, fakeId id);
const char *fakeName(fakeResult_t r);
void fakeReset(void);
fakeResult_t fakeOnDone(fakeHandle_t h, fakeCallback cb, void *userData);
#ifndef FAKE_OLD
fakeResult_t fakeSize(const fakeHandle_t h, size_t *bytes);
#endif
/* EXTRA */
#endif
