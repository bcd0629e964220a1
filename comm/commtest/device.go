package commtest

import (
	"fmt"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/kernels"
)

// Device memory and streams of the simulated ranks. These helpers act directly on the
// simulation: they are not library calls of the backend and are not counted by
// DriverCalls.

// Alloc allocates bytes of zeroed device memory on rank's device.
func (c *Cluster) Alloc(rank, bytes int) (comm.DevicePtr, error) {
	if err := c.checkRank("alloc", rank); err != nil {
		return 0, err
	}
	if bytes <= 0 {
		return 0, &comm.ArgError{Op: "alloc", Arg: "bytes", Value: bytes, Err: comm.ErrInvalidSize, Reason: "must be positive"}
	}
	p, err := c.w.Alloc(rank, uint64(bytes))
	return comm.DevicePtr(p), err
}

// Free frees memory from Alloc.
func (c *Cluster) Free(rank int, p comm.DevicePtr) error {
	if err := c.checkRank("free", rank); err != nil {
		return err
	}
	return c.w.Free(rank, gpulib.Ptr(p))
}

// Write copies data to p on rank's device at once, without waiting for any stream.
func (c *Cluster) Write(rank int, p comm.DevicePtr, data []byte) error {
	if err := c.checkRank("write", rank); err != nil {
		return err
	}
	return c.w.Write(rank, gpulib.Ptr(p), data)
}

// Read copies n bytes at p on rank's device at once. Like a copy on a stream that does
// not wait for others, it sees what the streams have done so far: wait for the
// operation first (the backend's blocking calls, SyncStream or Synchronize).
func (c *Cluster) Read(rank int, p comm.DevicePtr, n int) ([]byte, error) {
	if err := c.checkRank("read", rank); err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, &comm.ArgError{Op: "read", Arg: "n", Value: n, Err: comm.ErrInvalidSize, Reason: "negative"}
	}
	return c.w.Read(rank, gpulib.Ptr(p), uint64(n))
}

// WriteValues writes vals as elements of type t (see EncodeValues) at p on rank's device.
func (c *Cluster) WriteValues(rank int, p comm.DevicePtr, t comm.DType, vals []float64) error {
	b, err := EncodeValues(t, vals)
	if err != nil {
		return err
	}
	return c.Write(rank, p, b)
}

// ReadValues reads n elements of type t at p on rank's device.
func (c *Cluster) ReadValues(rank int, p comm.DevicePtr, t comm.DType, n int) ([]float64, error) {
	if !t.Valid() {
		return nil, &comm.ArgError{Op: "read values", Arg: "type", Value: int32(t), Err: comm.ErrInvalidType}
	}
	if n < 0 {
		return nil, &comm.ArgError{Op: "read values", Arg: "n", Value: n, Err: comm.ErrInvalidSize, Reason: "negative"}
	}
	b, err := c.Read(rank, p, n*t.Size())
	if err != nil {
		return nil, err
	}
	return DecodeValues(t, b)
}

// NewStream creates a stream on rank's device (a compute stream for AllReduceAsync, or
// a stream for SendTo/RecvFrom).
func (c *Cluster) NewStream(rank int) (comm.Stream, error) {
	if err := c.checkRank("new stream", rank); err != nil {
		return 0, err
	}
	s, err := c.w.NewStream(rank)
	return comm.Stream(s), err
}

// DestroyStream destroys a stream from NewStream.
func (c *Cluster) DestroyStream(rank int, s comm.Stream) error {
	if err := c.checkRank("destroy stream", rank); err != nil {
		return err
	}
	return c.w.DestroyStream(rank, gpulib.Stream(s))
}

// CopyAsync queues a device-to-device copy of bytes on stream s of rank's device:
// stand-in compute work.
func (c *Cluster) CopyAsync(rank int, dst, src comm.DevicePtr, bytes int, s comm.Stream) error {
	if err := c.checkRank("copy", rank); err != nil {
		return err
	}
	if bytes < 0 {
		return &comm.ArgError{Op: "copy", Arg: "bytes", Value: bytes, Err: comm.ErrInvalidSize, Reason: "negative"}
	}
	return c.w.CopyAsync(rank, gpulib.Ptr(dst), gpulib.Ptr(src), uint64(bytes), gpulib.Stream(s))
}

// SyncStream waits for the work queued on stream s of rank's device.
func (c *Cluster) SyncStream(rank int, s comm.Stream) error {
	if err := c.checkRank("sync stream", rank); err != nil {
		return err
	}
	return c.w.SyncStream(rank, gpulib.Stream(s))
}

// HoldStream blocks stream s of rank's device until release is called: work queued
// behind it waits, which makes ordering on the device observable.
func (c *Cluster) HoldStream(rank int, s comm.Stream) (release func(), err error) {
	if err := c.checkRank("hold stream", rank); err != nil {
		return nil, err
	}
	return c.w.Hold(rank, gpulib.Stream(s))
}

// Synchronize waits until every stream of rank's device has run the work queued so far
// (cuCtxSynchronize).
func (c *Cluster) Synchronize(rank int) error {
	if err := c.checkRank("synchronize", rank); err != nil {
		return err
	}
	return c.w.Synchronize(rank)
}

// AddKernel returns the handle of the in-place add kernel for element type t (BFloat16,
// Float16 or Float32) loaded on rank's device, for Backend.SetAddKernel. The simulated
// kernel computes with package kernels' Go reference.
func (c *Cluster) AddKernel(rank int, t comm.DType) (comm.Kernel, error) {
	if err := c.checkRank("add kernel", rank); err != nil {
		return 0, err
	}
	var name string
	switch t {
	case comm.BFloat16:
		name = kernels.AddBF16Name
	case comm.Float16:
		name = kernels.AddF16Name
	case comm.Float32:
		name = kernels.AddF32Name
	default:
		return 0, &comm.ArgError{Op: "add kernel", Arg: "type", Value: t, Err: comm.ErrInvalidType,
			Reason: "the add kernels exist for bfloat16, float16 and float32"}
	}
	f, err := c.w.LoadKernel(rank, name)
	if err != nil {
		return 0, fmt.Errorf("add kernel for %v on rank %d: %w", t, rank, err)
	}
	return comm.Kernel(f), nil
}
