package commtest

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// The suite's assertions, on the standard library only: engines import commtest from
// their tests, and commtest must not add dependencies to their modules. Each one fails
// the test at once (t.Fatalf) with the caller's message.
type checks struct{}

// require holds the assertions; call sites read like testify's require.
var require checks

func msg(args []any) string {
	switch len(args) {
	case 0:
		return ""
	case 1:
		return fmt.Sprint(args[0]) + ": "
	}
	if f, ok := args[0].(string); ok {
		return fmt.Sprintf(f, args[1:]...) + ": "
	}
	return fmt.Sprint(args...) + ": "
}

// NoError fails when err is not nil.
func (checks) NoError(t testing.TB, err error, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%sunexpected error: %v", msg(args), err)
	}
}

// ErrorIs fails unless errors.Is(err, target).
func (checks) ErrorIs(t testing.TB, err, target error, args ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%sgot error %v, want one matching %v", msg(args), err, target)
	}
}

// Equal fails unless want and got are deeply equal.
func (checks) Equal(t testing.TB, want, got any, args ...any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("%sgot %v, want %v", msg(args), got, want)
	}
}

// False fails when v is true.
func (checks) False(t testing.TB, v bool, args ...any) {
	t.Helper()
	if v {
		t.Fatalf("%sgot true, want false", msg(args))
	}
}

// Len fails unless v (a slice) has n elements.
func (checks) Len(t testing.TB, v any, n int, args ...any) {
	t.Helper()
	if l := reflect.ValueOf(v).Len(); l != n {
		t.Fatalf("%sgot %d elements, want %d", msg(args), l, n)
	}
}

// Nil fails unless v is nil (an untyped nil or a nil pointer, interface, slice, map).
func (checks) Nil(t testing.TB, v any, args ...any) {
	t.Helper()
	if v == nil {
		return
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Slice, reflect.Map, reflect.Func, reflect.Chan:
		if rv.IsNil() {
			return
		}
	}
	t.Fatalf("%sgot %v, want nil", msg(args), v)
}

// NotPanics fails when f panics.
func (checks) NotPanics(t testing.TB, f func(), args ...any) {
	t.Helper()
	var p any
	func() {
		defer func() { p = recover() }()
		f()
	}()
	if p != nil {
		t.Fatalf("%spanicked: %v", msg(args), p)
	}
}

// True fails when v is false.
func (checks) True(t testing.TB, v bool, args ...any) {
	t.Helper()
	if !v {
		t.Fatalf("%sgot false, want true", msg(args))
	}
}
