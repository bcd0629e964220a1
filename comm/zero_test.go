package comm_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ncclgo/ncclgo/comm"
)

// callEvery calls every exported method of v (a pointer to a zero value) with zero
// arguments (a background context for a context), and fails the test for each one that
// panics.
func callEvery(t *testing.T, v any) {
	t.Helper()
	rv := reflect.ValueOf(v)
	for i := range rv.NumMethod() {
		m, name := rv.Method(i), rv.Type().Method(i).Name
		args := make([]reflect.Value, m.Type().NumIn())
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

// The zero values of Single and NoOp never panic: every method works or returns an
// error.
func TestZeroValuesDoNotPanic(t *testing.T) {
	for _, v := range []any{new(comm.Single), new(comm.NoOp)} {
		t.Run(fmt.Sprintf("%T", v), func(t *testing.T) { callEvery(t, v) })
	}
}

// The zero Single has no element type: its reductions say so; the zero NoOp works.
func TestZeroSingleRefusesReductionsWithoutAnElementType(t *testing.T) {
	var s comm.Single
	assert.ErrorIs(t, s.AllReduce(8, 8), comm.ErrInvalidType)
	var n comm.NoOp
	assert.NoError(t, n.AllReduce(8, 2, comm.Float32, comm.Sum))
}
