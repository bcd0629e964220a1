//go:build !cgo

package rawdriver

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ncclgo/ncclgo/raw/nccl"
)

func TestWithoutCgoEveryCallFails(t *testing.T) {
	_, err := New(0, 0)
	assert.Error(t, err)
	_, err = UniqueID()
	assert.ErrorIs(t, err, nccl.ErrNeedsCgo)
	assert.ErrorIs(t, (&Driver{}).GroupStart(), nccl.ErrNeedsCgo)
}
