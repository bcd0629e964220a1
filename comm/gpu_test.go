//go:build gpu && cgo

package comm

import (
	"context"
	"encoding/binary"
	"math"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/cuda"
)

// TestGPUSingleRankBackend runs the NCCL backend of a one-rank world on the real GPU and
// libraries: every Backend operation, with the data checked on the host.
func TestGPUSingleRankBackend(t *testing.T) {
	if err := cuda.Init(0); err != nil {
		t.Skipf("no usable GPU: %v (run make libs; NCCLGO_LIBCUDA selects libcuda)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := NewUniqueID()
	require.NoError(t, err)
	b, err := NewNCCL(ctx, id, 0, 1, WithElementType(Float32), WithDevice(0), WithTimeout(30*time.Second))
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()
	t.Logf("NCCL %d", b.Communicator().Version())

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, b.c.d.SetDevice())
	buf, err := b.c.d.MemAlloc(64)
	require.NoError(t, err)
	defer func() { _ = b.c.d.MemFree(buf) }()

	in := make([]byte, 64)
	for i := range 16 {
		binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(float32(i)+0.5))
	}
	require.NoError(t, cuda.MemcpyHtoD(cuda.Deviceptr(buf), unsafe.Pointer(&in[0]), 64))
	require.NoError(t, cuda.CtxSynchronize()) // the pageable copy has landed before NCCL's streams read it
	ptr := DevicePtr(buf)

	require.NoError(t, b.AllReduce(ptr, 64))
	require.NoError(t, b.Broadcast(ptr, 64, 0))
	require.NoError(t, b.AllReduceAsync(ptr, 64, 0))
	require.NoError(t, b.Barrier())
	require.NoError(t, b.GroupStart())
	require.NoError(t, b.SendTo(ptr, 32, 0, 0))
	require.NoError(t, b.RecvFrom(ptr+32, 32, 0, 0))
	require.NoError(t, b.GroupEnd())
	require.NoError(t, cuda.CtxSynchronize())
	require.NoError(t, b.Communicator().Sync(ctx))

	out := make([]byte, 64)
	require.NoError(t, cuda.MemcpyDtoH(unsafe.Pointer(&out[0]), cuda.Deviceptr(buf), 64))
	assert.Equal(t, in[:32], out[:32], "a one-rank sum and broadcast leave the data")
	assert.Equal(t, in[:32], out[32:], "the self send/recv copied the first half")

	h, err := b.RegisterBuffer(ptr, 64)
	require.NoError(t, err)
	require.NoError(t, b.DeregisterBuffer(h))
	sym, err := b.SymmetricAlloc(1 << 20)
	require.NoError(t, err)
	require.NoError(t, b.AllReduce(sym, 1<<20))
	require.NoError(t, b.SymmetricFree(sym))
	assert.True(t, b.IsHealthy())
}
