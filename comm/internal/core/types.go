package core

import (
	"fmt"
	"strconv"
)

// DevicePtr is a device address (a CUDA CUdeviceptr). 0 is the null pointer.
type DevicePtr uint64

// String writes the address in hex, "0x7f0000001000" (errors print pointers this way).
func (p DevicePtr) String() string { return "0x" + strconv.FormatUint(uint64(p), 16) }

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

// Element types. The values are NCCL's ncclDataType_t numbers, written out here so that
// the core builds without NCCL's cgo bindings; comm/nccl's tests check them against the
// generated raw/nccl constants.
const (
	Int8       DType = 0
	Uint8      DType = 1
	Int32      DType = 2
	Uint32     DType = 3
	Int64      DType = 4
	Uint64     DType = 5
	Float16    DType = 6
	Float32    DType = 7
	Float64    DType = 8
	BFloat16   DType = 9
	Float8E4M3 DType = 10
	Float8E5M2 DType = 11
)

var DtypeInfo = [...]struct {
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
func (t DType) Valid() bool { return t >= 0 && int(t) < len(DtypeInfo) }

// Size returns the size of one element in bytes, or 0 for an invalid type.
func (t DType) Size() int {
	if !t.Valid() {
		return 0
	}
	return DtypeInfo[t].size
}

// String returns the type's lower-case name, e.g. "bfloat16".
func (t DType) String() string {
	if !t.Valid() {
		return fmt.Sprintf("dtype(%d)", int32(t))
	}
	return DtypeInfo[t].name
}

// ReduceOp is a reduction operator. Its values are NCCL's ncclRedOp_t numbers.
type ReduceOp int32

// Reduction operators. The values are NCCL's ncclRedOp_t numbers (checked against
// raw/nccl in comm/nccl's tests).
const (
	Sum  ReduceOp = 0
	Prod ReduceOp = 1
	Max  ReduceOp = 2
	Min  ReduceOp = 3
	Avg  ReduceOp = 4
)

// firstPreMulSum is ncclNumOps: operators made by ncclRedOpCreatePreMulSum are numbered
// from it.
const FirstPreMulSum ReduceOp = 5

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
