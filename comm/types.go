package comm

import (
	"fmt"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// DevicePtr is a device address (a CUDA CUdeviceptr). 0 is the null pointer.
type DevicePtr uint64

// Stream is a CUDA stream handle (CUstream, the same value as cudaStream_t). 0 is the
// legacy default stream.
type Stream uintptr

// Kernel is a CUDA kernel handle (CUfunction), as passed to Backend.SetAddKernel.
type Kernel uintptr

// BufferHandle identifies a registration made by Backend.RegisterBuffer.
type BufferHandle uint64

// UniqueID is NCCL's ncclUniqueId: 128 opaque bytes created by one rank and shared with
// every other rank of the communicator before construction.
type UniqueID [128]byte

// DType is the element type of a buffer. Its values are NCCL's ncclDataType_t numbers.
type DType int32

// Element types.
const (
	Int8       = DType(gpulib.Int8)
	Uint8      = DType(gpulib.Uint8)
	Int32      = DType(gpulib.Int32)
	Uint32     = DType(gpulib.Uint32)
	Int64      = DType(gpulib.Int64)
	Uint64     = DType(gpulib.Uint64)
	Float16    = DType(gpulib.Float16)
	Float32    = DType(gpulib.Float32)
	Float64    = DType(gpulib.Float64)
	BFloat16   = DType(gpulib.Bfloat16)
	Float8E4M3 = DType(gpulib.Float8e4m3)
	Float8E5M2 = DType(gpulib.Float8e5m2)
)

var dtypeInfo = [...]struct {
	name string
	size int
}{
	Int8:       {"int8", 1},
	Uint8:      {"uint8", 1},
	Int32:      {"int32", 4},
	Uint32:     {"uint32", 4},
	Int64:      {"int64", 8},
	Uint64:     {"uint64", 8},
	Float16:    {"float16", 2},
	Float32:    {"float32", 4},
	Float64:    {"float64", 8},
	BFloat16:   {"bfloat16", 2},
	Float8E4M3: {"float8e4m3", 1},
	Float8E5M2: {"float8e5m2", 1},
}

// Valid reports whether t is one of the element types above.
func (t DType) Valid() bool { return t >= 0 && int(t) < len(dtypeInfo) }

// Size returns the size of one element in bytes, or 0 for an invalid type.
func (t DType) Size() int {
	if !t.Valid() {
		return 0
	}
	return dtypeInfo[t].size
}

// String returns the type's lower-case name, e.g. "bfloat16".
func (t DType) String() string {
	if !t.Valid() {
		return fmt.Sprintf("dtype(%d)", int32(t))
	}
	return dtypeInfo[t].name
}

// ReduceOp is a reduction operator. Its values are NCCL's ncclRedOp_t numbers.
type ReduceOp int32

// Reduction operators.
const (
	Sum  = ReduceOp(gpulib.Sum)
	Prod = ReduceOp(gpulib.Prod)
	Max  = ReduceOp(gpulib.Max)
	Min  = ReduceOp(gpulib.Min)
	Avg  = ReduceOp(gpulib.Avg)
)

var opNames = [...]string{Sum: "sum", Prod: "prod", Max: "max", Min: "min", Avg: "avg"}

// Valid reports whether op is one of the operators above.
func (op ReduceOp) Valid() bool { return op >= 0 && int(op) < len(opNames) }

// String returns the operator's lower-case name, e.g. "sum".
func (op ReduceOp) String() string {
	if !op.Valid() {
		return fmt.Sprintf("reduce-op(%d)", int32(op))
	}
	return opNames[op]
}
