/* ncclgo's own stand-in for the CUDA runtime header, written for tools/bindgen.
 * nccl.h needs only cudaStream_t, size_t and CUDART_VERSION from it when parsed as C. */
#ifndef NCCLGO_STUB_CUDA_RUNTIME_H
#define NCCLGO_STUB_CUDA_RUNTIME_H
#include <stddef.h>
#define CUDART_VERSION 12040
typedef struct CUstream_st *cudaStream_t;
#endif
