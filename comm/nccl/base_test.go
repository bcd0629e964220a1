package nccl

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
)

// recordingCore records the required methods Base's defaults call.
type recordingCore struct {
	countingCore
	broadcasts []struct {
		ptr         comm.DevicePtr
		bytes, root int
	}
	allReduces []int
	closed     bool
}

func (r *recordingCore) Broadcast(p comm.DevicePtr, bytes, root int) error {
	r.broadcasts = append(r.broadcasts, struct {
		ptr         comm.DevicePtr
		bytes, root int
	}{p, bytes, root})
	return nil
}

func (r *recordingCore) AllReduce(_ comm.DevicePtr, bytes int) error {
	r.allReduces = append(r.allReduces, bytes)
	return nil
}

func (r *recordingCore) Close() error { r.closed = true; return nil }

// TestBaseGivesTheDefaults checks each method Base provides.
func TestBaseGivesTheDefaults(t *testing.T) {
	core := &recordingCore{countingCore: countingCore{rank: 1, world: 3}}
	b := comm.Base{Core: core}
	ctx := context.Background()

	err := b.RecvCommandU32(ctx, p, 1)
	assert.ErrorIs(t, err, comm.ErrInvalidRank, "root is this rank")
	require.NoError(t, b.RecvCommandU32(ctx, p, 2))
	require.Len(t, core.broadcasts, 1)
	assert.Equal(t, p, core.broadcasts[0].ptr)
	assert.Equal(t, 4, core.broadcasts[0].bytes)
	assert.Equal(t, 2, core.broadcasts[0].root)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, b.RecvCommandU32(cancelled, p, 0), context.Canceled)
	assert.Len(t, core.broadcasts, 1)

	require.NoError(t, b.AllReduceAsync(p, 64, 5))
	assert.Equal(t, []int{64}, core.allReduces)

	h, err := b.RegisterBuffer(p, 64)
	assert.NoError(t, err)
	assert.Zero(t, h)
	assert.NoError(t, b.DeregisterBuffer(h))
	_, err = b.SymmetricAlloc(64)
	assert.ErrorIs(t, err, comm.ErrUnsupported)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.ErrorIs(t, b.SymmetricFree(p), comm.ErrUnsupported)
	assert.NoError(t, b.SetAddKernel(3))
	assert.NoError(t, b.GroupStart())
	assert.NoError(t, b.GroupEnd())
	assert.True(t, b.IsHealthy())
	assert.NoError(t, b.AttemptReconnect(ctx))
	assert.NoError(t, b.Close())
	assert.True(t, core.closed, "Close closes a Core that is an io.Closer")

	var _ comm.Backend = b
}

// TestSingleDoesNothingSuccessfully checks Single's behaviour beyond validation.
func TestSingleDoesNothingSuccessfully(t *testing.T) {
	s, err := comm.NewSingle(comm.WithElementType(comm.BFloat16))
	require.NoError(t, err)
	assert.Equal(t, 0, s.Rank())
	assert.Equal(t, 1, s.WorldSize())
	assert.True(t, s.IsHealthy())
	for name, call := range everyCall(1) {
		switch name {
		case "RecvCommandU32", "SymmetricAlloc", "SymmetricFree", "DeregisterBuffer", "GroupStart", "GroupEnd", "Close":
			continue // covered below and in the bad-input table
		}
		assert.NoError(t, call(s), name)
	}
	require.NoError(t, s.GroupStart())
	require.NoError(t, s.AllReduce(p, 8))
	require.NoError(t, s.GroupEnd())
	h, err := s.RegisterBuffer(p, 8)
	require.NoError(t, err)
	require.NoError(t, s.DeregisterBuffer(h))
	require.NoError(t, s.DeregisterBuffer(h), "two registrations above, two deregistrations")
	assert.ErrorIs(t, s.DeregisterBuffer(h), comm.ErrUnknownHandle)
	assert.ErrorIs(t, s.RecvCommandU32(context.Background(), p, 0), comm.ErrInvalidRank)
	require.NoError(t, s.Close())
	assert.False(t, s.IsHealthy())
}

func TestDTypeSizesAndNames(t *testing.T) {
	tests := []struct {
		t    comm.DType
		size int
		name string
	}{
		{comm.Int8, 1, "int8"}, {comm.Uint8, 1, "uint8"}, {comm.Int32, 4, "int32"}, {comm.Uint32, 4, "uint32"},
		{comm.Int64, 8, "int64"}, {comm.Uint64, 8, "uint64"}, {comm.Float16, 2, "float16"}, {comm.Float32, 4, "float32"},
		{comm.Float64, 8, "float64"}, {comm.BFloat16, 2, "bfloat16"}, {comm.Float8E4M3, 1, "float8e4m3"},
		{comm.Float8E5M2, 1, "float8e5m2"}, {comm.DType(12), 0, "dtype(12)"}, {comm.DType(-1), 0, "dtype(-1)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.size, tc.t.Size())
			assert.Equal(t, tc.name, tc.t.String())
			assert.Equal(t, tc.size > 0, tc.t.Valid())
		})
	}
}

func TestReduceOpNames(t *testing.T) {
	tests := map[comm.ReduceOp]string{comm.Sum: "sum", comm.Prod: "prod", comm.Max: "max", comm.Min: "min", comm.Avg: "avg", comm.ReduceOp(5): "reduce-op(5)"}
	for op, name := range tests {
		assert.Equal(t, name, op.String())
		assert.Equal(t, op <= comm.Avg, op.Valid())
	}
}

func TestOpErrorMessages(t *testing.T) {
	cause := errors.New("ncclSystemError")
	assert.EqualError(t, &comm.OpError{Op: "all-reduce", Bytes: 4096, Rank: 1, GlobalRank: 1, Err: cause}, "all-reduce of 4096 bytes on rank 1: ncclSystemError")
	// The communicator's name and the global rank of a
	// sub-communicator's rank, and a timeout that says what waited.
	assert.EqualError(t, &comm.OpError{Op: "sync", Bytes: -1, Rank: 0, GlobalRank: 1, Name: "tp", Err: cause},
		`sync on rank 0 (global rank 1) of communicator "tp": ncclSystemError`)
	timeout := fmt.Errorf("%w: not completed within 1s", comm.ErrTimeout)
	for op, want := range map[string]string{
		"all-reduce":        "a collective waits until every rank joins it",
		"send":              "a send waits for the matching receive",
		"sync":              "the operations submitted so far had not completed",
		"split":             "every rank of the communicator must make this call",
		"attempt-reconnect": "every rank of the communicator must make this call",
	} {
		msg := (&comm.OpError{Op: op, Bytes: -1, Err: timeout}).Error()
		assert.Contains(t, msg, want, op)
		if op != "all-reduce" {
			assert.NotContains(t, msg, "collective waits until every rank joins it", op)
		}
	}
	assert.EqualError(t, &comm.OpError{Op: "init", Bytes: -1, Rank: 0, Err: cause}, "init on rank 0: ncclSystemError")
	assert.ErrorIs(t, &comm.OpError{Err: cause}, cause)
}
