/* ncclgo's own prelude for reading the host declarations of NCCL's nccl_device headers as C,
 * written for tools/bindgen (gen/nccl.json "extraHeaders"): included after nccl.h and
 * before them. Those headers keep their C++ behind `#if __cplusplus` and their device code
 * behind NCCL_CHECK_CUDACC, with the exceptions handled here. */
#ifndef NCCLGO_STUB_NCCL_DEVICE_HOST_H
#define NCCLGO_STUB_NCCL_DEVICE_HOST_H
/* core.h declares ncclGetMultimemDevicePointer with a by-value parameter spelled the C++
 * way, ncclMultimemHandle (no struct keyword); C reads it as the typedef core.h declares
 * for that struct. */
#define ncclMultimemHandle ncclMultimemHandle_t
/* gin.h is device code (C++ templates, alignas) without host declarations; gin_barrier.h
 * includes it, but its host declaration needs only core.h. gin.h's include guard keeps it
 * out. */
#define _NCCL_DEVICE_GIN_SESSION_H_
/* core.h 2.30.3 and 2.30.4 align ncclGinRequest_t the C++ way, struct alignas(uint64_t)
 * {...}; GNU C says the same with an attribute in that place (alignas is C++'s and
 * <stdalign.h>'s keyword, which C does not allow there). */
#define alignas(T) __attribute__((aligned(sizeof(T))))
#endif
