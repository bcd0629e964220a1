//go:build !cgo

package rawdriver

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

func TestWithoutCgoEveryCallFails(t *testing.T) {
	_, err := New(0, 0)
	assert.Error(t, err)
	_, err = UniqueID()
	assert.ErrorIs(t, err, nccl.ErrNeedsCgo)
	assert.ErrorIs(t, (&Driver{}).GroupStart(), nccl.ErrNeedsCgo)
	assert.ErrorIs(t, (&Driver{}).MemcpyHtoDAsync(0x1000, []byte{1}, 0), cuda.ErrNeedsCgo)
	assert.ErrorIs(t, (&Driver{}).MemcpyDtoHAsync([]byte{1}, 0x1000, 0), cuda.ErrNeedsCgo)
}
