package kernels

import (
	"encoding/binary"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKernelHostEmulationMatchesReference compares the sums add.cu computes
// when testdata/hostemu.cpp runs it on the CPU (CUDA's host conversions
// standing in for the device's) with AddBF16 and AddF16: every 16-bit
// pattern with every 257th pattern. kernels/build.sh check builds the
// emulator, writes its results and runs this test with
// NCCLGO_KERNELS_HOSTEMU naming the file; without it the test skips.
func TestKernelHostEmulationMatchesReference(t *testing.T) {
	path := os.Getenv("NCCLGO_KERNELS_HOSTEMU")
	if path == "" {
		t.Skip("NCCLGO_KERNELS_HOSTEMU not set: kernels/build.sh check runs this test")
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	const perRow = 65536/257 + 1
	require.Len(t, data, 65536*perRow*2*2, "emulator output size")
	var dst, src, wantBF, wantF16 []uint16
	for a := range 65536 {
		for b := 0; b < 65536; b += 257 {
			dst = append(dst, uint16(a))
			src = append(src, uint16(b))
		}
	}
	wantBF = append(wantBF, dst...)
	wantF16 = append(wantF16, dst...)
	require.NoError(t, AddBF16(wantBF, src))
	require.NoError(t, AddF16(wantF16, src))
	bad := 0
	for i := range dst {
		gotBF := binary.LittleEndian.Uint16(data[4*i:])
		gotF16 := binary.LittleEndian.Uint16(data[4*i+2:])
		if gotBF != wantBF[i] || gotF16 != wantF16[i] {
			if bad < 10 {
				t.Errorf("%#04x + %#04x: emulated kernel bf16 %#04x fp16 %#04x, reference bf16 %#04x fp16 %#04x",
					dst[i], src[i], gotBF, gotF16, wantBF[i], wantF16[i])
			}
			bad++
		}
	}
	require.Zero(t, bad, "%d of %d pairs differ", bad, len(dst))
}
