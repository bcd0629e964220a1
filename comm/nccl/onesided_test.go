package nccl

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// oneSidedStub is stubDriver with one-sided calls that call nothing.
type oneSidedStub struct{ stubDriver }

func (oneSidedStub) PutSignal(gpulib.Ptr, uint64, gpulib.DataType, int, gpulib.Handle, uint64, int, int, uint32, gpulib.Comm, gpulib.Stream) error {
	return nil
}
func (oneSidedStub) Signal(int, int, int, uint32, gpulib.Comm, gpulib.Stream) error   { return nil }
func (oneSidedStub) WaitSignal([]gpulib.SignalDesc, gpulib.Comm, gpulib.Stream) error { return nil }
func (oneSidedStub) WinGetUserPtr(gpulib.Comm, gpulib.Handle) (gpulib.Ptr, error) {
	return 0x20000, nil
}

// oneSidedBackend is a stub backend with a symmetric window of 8192 bytes at 0x20000.
func oneSidedBackend(tb testing.TB, d gpulib.Driver) (*Backend, WindowHandle) {
	tb.Helper()
	b := newStubNCCL(tb, d)
	mem, err := b.SymmetricAlloc(8192)
	require.NoError(tb, err)
	h, err := b.RegisterWindow(context.Background(), mem, 8192)
	require.NoError(tb, err)
	return b, h
}

// PutSignal, Signal and WaitSignal allocate nothing in comm.
func TestOneSidedDoesNotAllocate(t *testing.T) {
	b, h := oneSidedBackend(t, oneSidedStub{})
	waits := []SignalWait{{Peer: 1, Count: 2}}
	for name, f := range map[string]func() error{
		"PutSignal":  func() error { return b.PutSignal(0x21000, 4096, 1, h, 0, Signal{}, 3) },
		"Signal":     func() error { return b.Signal(1, Signal{}, 3) },
		"WaitSignal": func() error { return b.WaitSignal(waits, 3) },
	} {
		require.NoError(t, f(), name)
		if a := testing.AllocsPerRun(100, func() { _ = f() }); a != 0 {
			t.Errorf("%s: %v allocations per call", name, a)
		}
	}
}
