/* ncclgo stand-in for NVIDIA's cuda_fp16.h: nccl.h includes it but, as C, needs only the
 * marker macro the real header defines (nccl.h 2.22.3 declares ncclBfloat16 only under it). */
#define __CUDA_FP16_TYPES_EXIST__
