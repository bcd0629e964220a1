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

// TestCollectiveCallsReachTheRealLibrary checks that the calls of the typed
// collectives and of PreMulSum reach libnccl 2.29.7 (which has them all): NCCL itself
// rejects the null communicator.
func TestCollectiveCallsReachTheRealLibrary(t *testing.T) {
	libcache.Load(t)
	d := &Driver{}
	calls := map[string]func() error{
		"Reduce":   func() error { return d.Reduce(0x1000, 0x1000, 8, gpulib.Float32, gpulib.Sum, 0, 0, 0) },
		"AlltoAll": func() error { return d.AlltoAll(0x1000, 0x2000, 8, gpulib.Float32, 0, 0) },
		"Gather":   func() error { return d.Gather(0x1000, 0x2000, 8, gpulib.Float32, 0, 0, 0) },
		"Scatter":  func() error { return d.Scatter(0x1000, 0x2000, 8, gpulib.Float32, 0, 0, 0) },
		"RedOpCreatePreMulSum host": func() error {
			_, err := d.RedOpCreatePreMulSum(0, gpulib.Float32, 0x40000000, false)
			return err
		},
		"RedOpCreatePreMulSum device": func() error {
			_, err := d.RedOpCreatePreMulSum(0, gpulib.Float32, 0x1000, true)
			return err
		},
		"RedOpDestroy": func() error { return d.RedOpDestroy(0, gpulib.NumOps) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			var se *gpulib.Error
			require.ErrorAs(t, err, &se)
			assert.Equal(t, gpulib.InvalidArgument, se.Code, "a null communicator is an invalid argument")
			assert.ErrorIs(t, err, nccl.InvalidArgument)
		})
	}
}
