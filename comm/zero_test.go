package comm_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/mpi"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// callEvery calls every exported method of v (a pointer to a zero value) with zero
// arguments (a background context for a context), and fails the test for each one that
// panics.
func callEvery(t *testing.T, v any) {
	t.Helper()
	rv := reflect.ValueOf(v)
	for i := range rv.NumMethod() {
		m, name := rv.Method(i), rv.Type().Method(i).Name
		n := m.Type().NumIn()
		if m.Type().IsVariadic() {
			n-- // no variadic arguments
		}
		args := make([]reflect.Value, n)
		for j := range args {
			at := m.Type().In(j)
			if at == reflect.TypeFor[context.Context]() {
				args[j] = reflect.ValueOf(context.Background())
			} else {
				args[j] = reflect.Zero(at)
			}
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%T.%s of the zero value panicked: %v", v, name, r)
				}
			}()
			m.Call(args)
		}()
	}
}

// The zero values of Single, NoOp and the NCCL and MPI types never panic: every method
// works or returns an error.
func TestZeroValuesDoNotPanic(t *testing.T) {
	for _, v := range []any{new(comm.Single), new(comm.NoOp),
		new(nccl.Backend), new(nccl.Communicator), new(mpi.Communicator)} {
		t.Run(fmt.Sprintf("%T", v), func(t *testing.T) { callEvery(t, v) })
	}
}

// The zero Single has no element type: its reductions say so; the zero NoOp works.
func TestZeroSingleRefusesReductionsWithoutAnElementType(t *testing.T) {
	var s comm.Single
	assert.ErrorIs(t, s.AllReduce(8, 8), comm.ErrInvalidType)
	var n comm.NoOp
	assert.NoError(t, n.AllReduce(0x10000, 2, comm.Float32, comm.Sum))
}

// The zero NCCL and MPI values work where nothing is needed (Rank 0) and refuse
// operations with ErrClosed, saying that no constructor made them.
func TestZeroCommunicatorsRefuseOperations(t *testing.T) {
	var b nccl.Backend
	assert.Equal(t, 0, b.Rank())
	err := b.AllReduce(0, 0)
	assert.ErrorIs(t, err, comm.ErrClosed)
	assert.ErrorContains(t, err, "not made by a constructor")
	assert.ErrorIs(t, new(nccl.Communicator).Sync(context.Background()), comm.ErrClosed)
	assert.ErrorIs(t, new(mpi.Communicator).Barrier(context.Background()), comm.ErrClosed)
}
