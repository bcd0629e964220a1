//go:build cgo

package rawdriver

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/libcache"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// The real libnccl (2.29.7) has the one-sided calls, and its own argument errors reach
// comm as *gpulib.Error with NCCL's result: a null communicator is an invalid
// argument, also for ncclWinGetUserPtr.
func TestOneSidedCallsReachTheRealLibrary(t *testing.T) {
	libcache.Load(t)
	d := &Driver{}
	for name, call := range map[string]func() error{
		"PutSignal":  func() error { return d.PutSignal(0x1000, 8, gpulib.Uint8, 1, 1, 0, 0, 0, 0, 0, 0) },
		"Signal":     func() error { return d.Signal(1, 0, 0, 0, 0, 0) },
		"WaitSignal": func() error { return d.WaitSignal([]gpulib.SignalDesc{{OpCnt: 1, Peer: 1}}, 0, 0) },
		"WinGetUserPtr": func() error {
			_, err := d.WinGetUserPtr(0, 1)
			return err
		},
	} {
		err := call()
		var se *gpulib.Error
		require.ErrorAs(t, err, &se, name)
		assert.Equal(t, gpulib.InvalidArgument, se.Code, name)
		assert.ErrorIs(t, err, nccl.InvalidArgument, name)
	}
}
