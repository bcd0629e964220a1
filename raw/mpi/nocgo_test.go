//go:build !cgo

package mpi_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ncclgo/ncclgo/raw/mpi"
)

func TestWithoutCgoCallsReturnErrNeedsCgo(t *testing.T) {
	_, err := mpi.CommWorld()
	assert.ErrorIs(t, err, mpi.ErrNeedsCgo, "handle accessors need the library")
	assert.ErrorIs(t, mpi.Barrier(0), mpi.ErrNeedsCgo)
	assert.Equal(t, "mpi: error code 5", mpi.ErrorCode(mpi.ErrComm).Error())
	assert.EqualValues(t, 1, mpi.InPlace, "constants work without cgo")
}
