package kernels

import (
	_ "embed" // the generated PTX
	"errors"
	"fmt"
)

// The entry points of add.ptx. Each takes (dst, src pointer, n uint64
// elements) and adds src into dst in place; the simulator in comm/commtest
// and the GPU tests refer to the kernels by these names.
const (
	AddBF16Name = "ncclgo_add_bf16"
	AddF16Name  = "ncclgo_add_f16"
	AddF32Name  = "ncclgo_add_f32"
)

//go:embed add.ptx
var addPTX string

// PTX returns the PTX of the add kernels, generated from add.cu by
// kernels/build.sh and embedded in the package. Its first line records the
// sha256 of the add.cu it was generated from.
func PTX() string {
	return addPTX
}

// Kind selects one of the add kernels by element type.
type Kind int

// The element types the add kernels support.
const (
	BF16 Kind = iota + 1 // bfloat16, 2 bytes
	F16                  // IEEE binary16, 2 bytes
	F32                  // IEEE binary32, 4 bytes
)

// Kinds returns every supported Kind, in a fixed order (a new slice each
// call).
func Kinds() []Kind {
	return []Kind{BF16, F16, F32}
}

// ErrKind reports a Kind that is not one of BF16, F16 and F32.
var ErrKind = errors.New("unsupported add kernel kind")

// String returns "bf16", "fp16" or "fp32", or "Kind(n)" for anything else.
func (k Kind) String() string {
	switch k {
	case BF16:
		return "bf16"
	case F16:
		return "fp16"
	case F32:
		return "fp32"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Name returns the PTX entry point of k's add kernel, or an error wrapping
// ErrKind.
func (k Kind) Name() (string, error) {
	switch k {
	case BF16:
		return AddBF16Name, nil
	case F16:
		return AddF16Name, nil
	case F32:
		return AddF32Name, nil
	}
	return "", fmt.Errorf("add kernel for %v: %w", k, ErrKind)
}

// ElemSize returns the size in bytes of one element of kind k, or an error
// wrapping ErrKind.
func (k Kind) ElemSize() (int, error) {
	switch k {
	case BF16, F16:
		return 2, nil
	case F32:
		return 4, nil
	}
	return 0, fmt.Errorf("element size of %v: %w", k, ErrKind)
}
