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

// The device API's calls reach libnccl 2.29.7 with arguments it accepts (size, magic and
// a version no newer than its own: it would refuse those with ncclInvalidUsage), so a
// NULL communicator or window is refused for what it is, ncclInvalidArgument, as a
// *gpulib.Error; a failed ncclDevCommCreate keeps nothing pinned.
func TestDeviceAPIFailuresFromTheRealLibrary(t *testing.T) {
	libcache.Load(t)
	assert.EqualValues(t, 22907, structVersion(), "the loaded library's version, not the header's 2.30.7")
	d := &Driver{}
	calls := map[string]func() error{
		"CommCuDevice":        func() error { _, err := d.CommCuDevice(0); return err },
		"CommQueryProperties": func() error { _, err := d.CommQueryProperties(0); return err },
		"DevCommCreate": func() error {
			dc, err := d.DevCommCreate(0, gpulib.DevCommRequirements{LsaBarrierCount: 1})
			assert.Nil(t, dc)
			return err
		},
		"DevCommDestroy":              func() error { return d.DevCommDestroy(0, new(nccl.DevComm)) },
		"GetLsaDevicePointer":         func() error { _, err := d.GetLsaDevicePointer(0, 0, 0); return err },
		"GetPeerDevicePointer":        func() error { _, err := d.GetPeerDevicePointer(0, 0, 0); return err },
		"GetLsaMultimemDevicePointer": func() error { _, err := d.GetLsaMultimemDevicePointer(0, 0); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			var se *gpulib.Error
			require.ErrorAs(t, err, &se)
			assert.Equal(t, gpulib.InvalidArgument, se.Code)
		})
	}
	n := 0
	devComms.Range(func(any, any) bool { n++; return true })
	assert.Zero(t, n, "nothing stays pinned after a failure")
}
