//go:build cgo

package rawdriver

import (
	"runtime"
	"testing"
	"unsafe"

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

// TestConfigSetsFieldsByTheirCNames checks that the ncclConfig_t made for
// ncclCommInitRankConfig carries the options' fields, found by their C names, and
// keeps NCCL's "undefined" for the others.
func TestConfigSetsFieldsByTheirCNames(t *testing.T) {
	var pin runtime.Pinner
	defer pin.Unpin()
	c := config(gpulib.Config{Name: "tp", NetName: "Socket", Ints: []gpulib.ConfigInt{
		{Name: "cgaClusterSize", Value: 4}, {Name: "CTAPolicy", Value: 1}, {Name: "nvlsCTAs", Value: 2}, {Name: "noSuchField", Value: 9}}}, &pin)
	assert.Equal(t, int32(0), c.Blocking)
	assert.Equal(t, int32(4), c.CgaClusterSize)
	assert.Equal(t, int32(1), c.CTAPolicy)
	assert.Equal(t, int32(2), c.NvlsCTAs)
	assert.Equal(t, nccl.NewConfig().MinCTAs, c.MinCTAs, "unset fields keep NCCL_CONFIG_UNDEF_INT")
	assert.Equal(t, "Socket", unsafe.String(c.NetName, 6))
	assert.Equal(t, "tp", unsafe.String(c.CommName, 2))
}
