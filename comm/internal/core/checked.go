package core

import (
	"reflect"
	"sync"
)

// checkedTypes holds the backend types that run the guard themselves (Single, the
// Validate wrapper, comm/nccl's Backend): comm.Validate returns them unchanged.
var checkedTypes sync.Map // reflect.Type -> struct{}

// MarkChecked records that values of v's dynamic type run the guard themselves.
func MarkChecked(v any) { checkedTypes.Store(reflect.TypeOf(v), struct{}{}) }

// IsChecked reports whether v's dynamic type was marked with MarkChecked.
func IsChecked(v any) bool {
	_, ok := checkedTypes.Load(reflect.TypeOf(v))
	return ok
}
