package comm

import "github.com/ncclgo/ncclgo/comm/internal/core"

// Option configures NewSingle and Validate. The NCCL and MPI packages have options of
// their own (nccl.Option, mpi.Option): an option a constructor does not read does not
// compile there.
type Option func(*options)

type options struct {
	elem DType
}

func newOptions(opts []Option) options {
	o := options{elem: core.ElemUnset}
	core.Apply(&o, opts)
	return o
}

// WithElementType sets the element type of a Backend's reductions: sizes must be a
// multiple of its size. NewSingle and Validate require it (there is no default: a
// default summed float32 data as bfloat16, silently).
func WithElementType(t DType) Option { return func(o *options) { o.elem = t } }
