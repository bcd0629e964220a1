//go:build gpu && cgo

package nccl

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/cuda/cudatest"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// TestGPUOneSidedSelf runs the one-sided calls of a one-rank world on the real GPU and
// libraries: a PutSignal from the outbox window into the inbox window at an offset, a
// Signal, a WaitSignal for both, and the bytes checked on the host; the window's user
// pointer is its buffer; then a put and a wait inside a Group. An NCCL before 2.29.2
// answers ErrUnsupported.
func TestGPUOneSidedSelf(t *testing.T) {
	if err := cuda.Init(0); err != nil {
		t.Skipf("no usable GPU: %v (run make libs; NCCLGO_LIBCUDA selects libcuda)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := NewUniqueID()
	require.NoError(t, err)
	b, err := New(ctx, id, 0, 1, WithDevice(0), WithTimeout(30*time.Second))
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()
	if v := b.Communicator().Version(); v < versionOneSided {
		require.ErrorIs(t, b.Signal(0, Signal{}, 0), comm.ErrUnsupported)
		t.Skipf("NCCL %d has no one-sided calls", v)
	}
	if err := b.Signal(0, Signal{}, 0); errors.Is(err, nccl.InvalidUsage) || errors.Is(err, nccl.InvalidArgument) {
		// No host RMA here (no symmetric memory support, or a CUDA driver before 12.5).
		t.Skipf("NCCL refuses one-sided calls on this machine: %v", err)
	} else {
		require.NoError(t, err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, b.c.d.SetDevice())

	mem, err := b.SymmetricAlloc(2 * 4096)
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.SymmetricFree(mem)) }()
	inbox, err := b.RegisterWindow(ctx, mem, 4096)
	require.NoError(t, err)
	outbox := mem + 4096
	_, err = b.RegisterWindow(ctx, outbox, 4096)
	require.NoError(t, err)

	in := make([]byte, 4096)
	for i := range in {
		in[i] = byte(i*7 + 1)
	}
	require.NoError(t, cudatest.Upload(cuda.Deviceptr(mem), make([]byte, 4096)))
	require.NoError(t, cudatest.Upload(cuda.Deviceptr(outbox), in))
	require.NoError(t, b.PutSignal(outbox, 1024, 0, inbox, 2048, Signal{}, 0))
	require.NoError(t, b.WaitSignal([]SignalWait{{Peer: 0, Count: 2}}, 0)) // the Signal above and the put
	require.NoError(t, b.Communicator().Sync(ctx))

	out := make([]byte, 4096)
	require.NoError(t, cudatest.Download(out, cuda.Deviceptr(mem)))
	assert.Equal(t, make([]byte, 2048), out[:2048], "bytes before the offset untouched")
	assert.Equal(t, in[:1024], out[2048:3072], "the put landed at its offset")
	assert.Equal(t, make([]byte, 1024), out[3072:], "bytes after the put untouched")
	p, err := b.WindowUserPtr(inbox)
	require.NoError(t, err)
	assert.Equal(t, mem, p)

	// Inside a group the put and the wait are recorded and made by Submit, the put first.
	require.NoError(t, cudatest.Upload(cuda.Deviceptr(mem), make([]byte, 4096)))
	g := b.NewGroup()
	require.NoError(t, g.Add(func() error {
		return errors.Join(b.PutSignal(outbox+1024, 512, 0, inbox, 0, Signal{}, 0),
			b.WaitSignal([]SignalWait{{Peer: 0, Count: 1}}, 0))
	}))
	require.NoError(t, g.Submit())
	require.NoError(t, b.Communicator().Sync(ctx))
	require.NoError(t, cudatest.Download(out, cuda.Deviceptr(mem)))
	assert.Equal(t, in[1024:1536], out[:512], "the grouped put landed")
	assert.Equal(t, make([]byte, 4096-512), out[512:], "nothing else changed")
}
