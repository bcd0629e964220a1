//go:build gpu && cgo

package nccl

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/cuda/cudatest"
)

// TestGPUGroupValueAndInGroup runs the group API (Group, InGroup) on the real GPU and
// libraries, one rank: a Group with a send/recv exchange and an all-reduce submitted in
// one crossing (the data checked on the host), the same Group reused, comm.InGroup's
// discard when its function fails (nothing reaches NCCL, nothing stays open), and a
// goroutine that ends inside GroupStart leaving nothing for the next one.
func TestGPUGroupValueAndInGroup(t *testing.T) {
	if err := cuda.Init(0); err != nil {
		t.Skipf("no usable GPU: %v (run make libs; NCCLGO_LIBCUDA selects libcuda)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := NewUniqueID()
	require.NoError(t, err)
	b, err := New(ctx, id, 0, 1, WithElementType(comm.Float32), WithDevice(0), WithTimeout(30*time.Second))
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()

	runtime.LockOSThread()
	require.NoError(t, b.c.d.SetDevice())
	buf, err := b.c.d.MemAlloc(128)
	require.NoError(t, err)
	runtime.UnlockOSThread()
	defer func() { _ = b.c.d.MemFree(buf) }()
	in := make([]byte, 128)
	for i := range 32 {
		binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(float32(i)+0.25))
	}
	require.NoError(t, cudatest.Upload(cuda.Deviceptr(buf), in))
	ptr := comm.DevicePtr(buf)

	g := b.NewGroup()
	for round := range 2 { // the same Group, twice
		require.NoError(t, g.Add(func() error {
			if err := b.SendTo(ptr, 32, 0, 0); err != nil {
				return err
			}
			if err := b.RecvFrom(ptr+64, 32, 0, 0); err != nil {
				return err
			}
			return b.AllReduce(ptr+96, 32)
		}), "round %d", round)
		require.NoError(t, g.Submit(), "round %d", round)
	}
	require.NoError(t, b.Communicator().Sync(ctx))
	out := make([]byte, 128)
	require.NoError(t, cudatest.Download(out, cuda.Deviceptr(buf)))
	assert.Equal(t, in[:32], out[64:96], "the exchange landed")
	assert.Equal(t, in[96:], out[96:], "a one-rank all-reduce leaves the data")

	boom := errors.New("boom")
	err = comm.InGroup(b, func() error {
		if err := b.AllReduce(ptr, 64); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.ErrorIs(t, b.GroupEnd(), comm.ErrGroupNotOpen, "the discarded group left a level open")

	done := make(chan error)
	go func() { done <- b.GroupStart() }() // returns inside its group
	require.NoError(t, <-done)
	for range 16 {
		go func() { done <- b.AllReduce(ptr, 64) }()
		require.NoError(t, <-done)
	}
	require.NoError(t, b.Communicator().Sync(ctx), "no group of another goroutine is this one's")
}
