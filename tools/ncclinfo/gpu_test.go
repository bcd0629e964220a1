//go:build gpu

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/cuda"
)

// On a GPU machine (make gpu-bundle): the driver's device list.
func TestGPUDevicesAreListed(t *testing.T) {
	if err := cuda.Init(0); err != nil {
		t.Skipf("no usable GPU: %v", err)
	}
	out, code := ncclinfo(t, nil, "--json")
	require.Equal(t, 0, code, out)
	r := decodeReport(t, out)
	require.True(t, r.CUDA.Loaded, r.CUDA.Error)
	require.Empty(t, r.GPUs.Error)
	require.Positive(t, r.GPUs.Count)
	require.Len(t, r.GPUs.Devices, r.GPUs.Count)
	assert.Len(t, r.GPUs.Peers, r.GPUs.Count*(r.GPUs.Count-1))
	for _, d := range r.GPUs.Devices {
		assert.NotEmpty(t, d.Name)
		assert.Positive(t, d.MemoryBytes)
		assert.Regexp(t, `^\d+\.\d+$`, d.ComputeCapability)
		assert.Positive(t, d.Multiprocessors)
		assert.Regexp(t, `^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]$`, d.PCIBusID)
	}
	t.Log(out)
}
