/* ncclgo's own stand-in for the CUDA driver header, written for tools/bindgen: the
 * nccl_device headers include it but, as C host declarations, need only the type below
 * (nccl_device/impl/core__types.h 2.30: struct ncclSegmentWindow). Its values are
 * raw/cuda's (cuda.h); here only the type's size matters. */
#ifndef NCCLGO_STUB_CUDA_H
#define NCCLGO_STUB_CUDA_H
typedef enum CUmemLocationType_enum {
	CU_MEM_LOCATION_TYPE_INVALID = 0x0,
	CU_MEM_LOCATION_TYPE_MAX = 0x7FFFFFFF
} CUmemLocationType;
#endif
