package rawdriver

import (
	"reflect"
	"runtime"
	"unicode"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// Reduce is ncclReduce.
func (d *Driver) Reduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, root int, c gpulib.Comm, s gpulib.Stream) error {
	return ncclErr(nccl.Reduce(ptr(send), ptr(recv), count, nccl.DataType(dt), nccl.RedOp(op), int32(root), nccl.Comm(c), nccl.CudaStream(s)))
}

// AlltoAll is ncclAlltoAll (NCCL >= 2.28.3).
func (d *Driver) AlltoAll(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	return ncclErr(nccl.AlltoAll(ptr(send), ptr(recv), count, nccl.DataType(dt), nccl.Comm(c), nccl.CudaStream(s)))
}

// Gather is ncclGather (NCCL >= 2.28.3).
func (d *Driver) Gather(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return ncclErr(nccl.Gather(ptr(send), ptr(recv), count, nccl.DataType(dt), int32(root), nccl.Comm(c), nccl.CudaStream(s)))
}

// Scatter is ncclScatter (NCCL >= 2.28.3).
func (d *Driver) Scatter(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return ncclErr(nccl.Scatter(ptr(send), ptr(recv), count, nccl.DataType(dt), int32(root), nccl.Comm(c), nccl.CudaStream(s)))
}

// RedOpCreatePreMulSum is ncclRedOpCreatePreMulSum, with the scalar on the host
// (ncclScalarHostImmediate: its bytes are in scalar, copied by NCCL during the call) or
// on the device (ncclScalarDevice: scalar is its address).
func (d *Driver) RedOpCreatePreMulSum(c gpulib.Comm, dt gpulib.DataType, scalar uint64, device bool) (gpulib.RedOp, error) {
	var op nccl.RedOp
	var err error
	if device {
		err = nccl.RedOpCreatePreMulSum(&op, ptr(gpulib.Ptr(scalar)), nccl.DataType(dt), nccl.ScalarDevice, nccl.Comm(c))
	} else {
		host := scalar // little-endian: the element's bytes come first
		err = nccl.RedOpCreatePreMulSum(&op, unsafe.Pointer(&host), nccl.DataType(dt), nccl.ScalarHostImmediate, nccl.Comm(c))
	}
	return op, ncclErr(err)
}

// RedOpDestroy is ncclRedOpDestroy.
func (d *Driver) RedOpDestroy(c gpulib.Comm, op gpulib.RedOp) error {
	return ncclErr(nccl.RedOpDestroy(nccl.RedOp(op), nccl.Comm(c)))
}

// setConfig sets cfg's netName and int fields in c; an int field is named by its C
// name, whose Go field is the same name with its first letter upper-cased. Names the
// generated Config lacks are ignored (comm checks them against the loaded NCCL first).
func setConfig(c *nccl.Config, cfg gpulib.Config, pin *runtime.Pinner) {
	if cfg.NetName != "" {
		name := append([]byte(cfg.NetName), 0)
		pin.Pin(&name[0])
		c.NetName = &name[0]
	}
	v := reflect.ValueOf(c).Elem()
	for _, f := range cfg.Ints {
		if f.Name == "" {
			continue
		}
		r := []rune(f.Name)
		r[0] = unicode.ToUpper(r[0])
		if fv := v.FieldByName(string(r)); fv.IsValid() && fv.Kind() == reflect.Int32 {
			fv.SetInt(int64(f.Value))
		}
	}
}
