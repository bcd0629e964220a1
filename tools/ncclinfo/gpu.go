package main

import (
	"bytes"
	"fmt"

	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// cudaInfo is raw/cuda's load record (the same type as raw/nccl's).
func cudaInfo() nccl.LoadInfo { return cuda.LibraryInfo() }

// probeGPUs asks the CUDA driver for its devices and the links between them.
func probeGPUs() GPUs {
	if err := cuda.Init(0); err != nil {
		return GPUs{Error: fmt.Sprintf("cuInit: %v", err)}
	}
	var n int32
	if err := cuda.DeviceGetCount(&n); err != nil {
		return GPUs{Error: fmt.Sprintf("cuDeviceGetCount: %v", err)}
	}
	g := GPUs{Count: int(n)}
	devs := make([]cuda.Device, n)
	for i := range devs {
		d, err := device(i, &devs[i])
		if err != nil {
			g.Error = err.Error()
			return g
		}
		g.Devices = append(g.Devices, d)
	}
	for i := range devs {
		for j := range devs {
			if i == j {
				continue
			}
			p, err := peer(devs, i, j)
			if err != nil {
				g.Error = err.Error()
				return g
			}
			g.Peers = append(g.Peers, p)
		}
	}
	return g
}

// device describes ordinal i and stores its handle in h.
func device(i int, h *cuda.Device) (GPU, error) {
	g := GPU{Index: i}
	if err := cuda.DeviceGet(h, int32(i)); err != nil {
		return g, fmt.Errorf("cuDeviceGet(%d): %w", i, err)
	}
	name := make([]byte, 256)
	if err := cuda.DeviceGetName(&name[0], int32(len(name)), *h); err != nil {
		return g, fmt.Errorf("cuDeviceGetName(%d): %w", i, err)
	}
	g.Name = cString(name)
	if err := cuda.DeviceTotalMem(&g.MemoryBytes, *h); err != nil {
		return g, fmt.Errorf("cuDeviceTotalMem(%d): %w", i, err)
	}
	var major, minor, sms int32
	for _, a := range []struct {
		attr cuda.DeviceAttribute
		v    *int32
	}{
		{cuda.DeviceAttributeComputeCapabilityMajor, &major},
		{cuda.DeviceAttributeComputeCapabilityMinor, &minor},
		{cuda.DeviceAttributeMultiprocessorCount, &sms},
	} {
		if err := cuda.DeviceGetAttribute(a.v, a.attr, *h); err != nil {
			return g, fmt.Errorf("cuDeviceGetAttribute(%d, %d): %w", a.attr, i, err)
		}
	}
	g.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	g.Multiprocessors = int(sms)
	bus := make([]byte, 64)
	if err := cuda.DeviceGetPCIBusId(&bus[0], int32(len(bus)), *h); err != nil {
		return g, fmt.Errorf("cuDeviceGetPCIBusId(%d): %w", i, err)
	}
	g.PCIBusID = cString(bus)
	return g, nil
}

// peer describes the link from device i to device j.
func peer(devs []cuda.Device, i, j int) (Peer, error) {
	p := Peer{From: i, To: j}
	var access, atomics, rank int32
	if err := cuda.DeviceCanAccessPeer(&access, devs[i], devs[j]); err != nil {
		return p, fmt.Errorf("cuDeviceCanAccessPeer(%d, %d): %w", i, j, err)
	}
	p.Access = access != 0
	if !p.Access {
		return p, nil
	}
	if err := cuda.DeviceGetP2PAttribute(&atomics, cuda.DeviceP2pAttributeNativeAtomicSupported, devs[i], devs[j]); err != nil {
		return p, fmt.Errorf("cuDeviceGetP2PAttribute(native atomics, %d, %d): %w", i, j, err)
	}
	if err := cuda.DeviceGetP2PAttribute(&rank, cuda.DeviceP2pAttributePerformanceRank, devs[i], devs[j]); err != nil {
		return p, fmt.Errorf("cuDeviceGetP2PAttribute(performance rank, %d, %d): %w", i, j, err)
	}
	p.NativeAtomics, p.PerformanceRank = atomics != 0, int(rank)
	return p, nil
}

// cString is the text of a NUL-terminated buffer the driver filled.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
