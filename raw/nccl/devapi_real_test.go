//go:build cgo

package nccl_test

import (
	"os"
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// The device API's host functions called into the real libraries without a GPU: the
// library's own checks of a NULL communicator or window (ncclInvalidArgument), and the
// requirement helpers, which compute without a device. A library older than a
// function reports the version that has it.
func TestDeviceAPICallsIntoRealLibrary(t *testing.T) {
	if !dltest.InChild() {
		runOnRealLibraries(t, "TestDeviceAPICallsIntoRealLibrary")
		return
	}
	code, err := strconv.Atoi(os.Getenv("NCCLGO_TEST_CODE"))
	require.NoError(t, err)
	has := func(sym string) bool {
		for _, s := range nccl.ExportSymbols {
			if s.Name == sym {
				return versionCode(t, s.Since) <= code
			}
		}
		t.Fatalf("%s is not in the symbol table", sym)
		return false
	}
	check := func(sym string, err error) {
		t.Helper()
		if has(sym) {
			assert.ErrorIs(t, err, nccl.InvalidArgument, "%s on NULL", sym)
		} else {
			assert.ErrorIs(t, err, nccl.ErrSymbolNotFound, sym)
		}
	}
	var dev int32
	check("ncclCommCuDevice", nccl.CommCuDevice(0, &dev))
	props := nccl.CommProperties{Size: uint64(unsafe.Sizeof(nccl.CommProperties{})), Magic: nccl.ApiMagic, Version: uint32(code)}
	check("ncclCommQueryProperties", nccl.CommQueryProperties(0, &props))
	req := nccl.DevCommRequirements{Size: uint64(unsafe.Sizeof(nccl.DevCommRequirements{})), Magic: nccl.ApiMagic, Version: uint32(code)}
	var dc nccl.DevComm
	check("ncclDevCommCreate", nccl.DevCommCreate(0, &req, &dc))
	check("ncclDevCommDestroy", nccl.DevCommDestroy(0, &dc))
	var p unsafe.Pointer
	check("ncclGetLsaDevicePointer", nccl.GetLsaDevicePointer(0, 0, 0, &p))
	check("ncclGetPeerDevicePointer", nccl.GetPeerDevicePointer(0, 0, 0, &p))
	check("ncclGetLsaMultimemDevicePointer", nccl.GetLsaMultimemDevicePointer(0, 0, &p))
	assert.Nil(t, p)

	if !has("ncclLLA2ACalcSlots") {
		_, err := nccl.LLA2ACalcSlots(10, 12)
		assert.ErrorIs(t, err, nccl.ErrSymbolNotFound)
		return
	}
	slots, err := nccl.LLA2ACalcSlots(10, 12)
	require.NoError(t, err)
	assert.EqualValues(t, 10*2, slots, "maxElts times the 8-byte words of an element")

	var lla nccl.LLA2AHandle
	var rr nccl.DevResourceRequirements
	require.NoError(t, nccl.LLA2ACreateRequirement(2, 3, &lla, &rr))
	assert.EqualValues(t, 3, lla.NSlots)
	assert.EqualValues(t, 2*(1+2*3)*16, rr.BufferSize)
	assert.EqualValues(t, 16, rr.BufferAlign)
	assert.Same(t, &lla.BufHandle, rr.OutBufferHandle, "NCCL fills the handle's buffer during ncclDevCommCreate")

	var bar nccl.LsaBarrierHandle
	rr = nccl.DevResourceRequirements{}
	require.NoError(t, nccl.LsaBarrierCreateRequirement(nccl.Team{NRanks: 4, Rank: 1, Stride: 1}, 2, &bar, &rr))
	assert.EqualValues(t, 2, bar.NBarriers)
	assert.EqualValues(t, (3*2+2*4)*4, rr.BufferSize)
	assert.EqualValues(t, 4, rr.BufferAlign)
}
