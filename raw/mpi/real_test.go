//go:build cgo

package mpi_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
	"github.com/ncclgo/ncclgo/raw/mpi"
)

const installHint = "apt-get install openmpi-bin libopenmpi-dev"

// needLibMPI skips (fails under NCCLGO_STRICT) when Open MPI's libmpi.so.40 is not
// installed.
func needLibMPI(t *testing.T) {
	t.Helper()
	if err := mpi.Load(); err != nil {
		msg := "Open MPI is not installed (" + err.Error() + "): " + installHint
		if os.Getenv("NCCLGO_STRICT") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// singletonEnv lets a root process start MPI (a singleton, no mpirun).
var singletonEnv = []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_opal_signal="}

func TestWrongExplicitPathNamesWhatWasTried(t *testing.T) {
	if dltest.InChild() {
		err := mpi.Load()
		require.ErrorIs(t, err, mpi.ErrLibraryNotFound)
		var le *mpi.LoadError
		require.True(t, errors.As(err, &le))
		assert.Contains(t, err.Error(), "/nonexistent/libmpi.so.40 (NCCLGO_LIBMPI)")
		assert.Contains(t, err.Error(), "Open MPI library not found")
		require.Len(t, le.Attempts, 1, "an explicit path is the only candidate")
		_, err = mpi.CommWorld()
		assert.ErrorIs(t, err, mpi.ErrLibraryNotFound, "handle accessors report the load error")
		assert.ErrorIs(t, mpi.Barrier(0), mpi.ErrLibraryNotFound)
		return
	}
	dltest.RunChild(t, "TestWrongExplicitPathNamesWhatWasTried", "NCCLGO_LIBMPI=/nonexistent/libmpi.so.40")
}

// TestSingletonThroughGeneratedBindings starts MPI without mpirun (one rank) and uses the
// generated functions and handle accessors: the handles must be the library's globals
// (MPI_Type_size of each datatype handle is its C size), a reduction must reduce.
func TestSingletonThroughGeneratedBindings(t *testing.T) {
	if !dltest.InChild() {
		needLibMPI(t)
		dltest.RunChild(t, "TestSingletonThroughGeneratedBindings", singletonEnv...)
		return
	}
	needLibMPI(t)
	var provided int32
	require.NoError(t, mpi.InitThread(nil, nil, mpi.ThreadSerialized, &provided))
	assert.GreaterOrEqual(t, provided, int32(mpi.ThreadSerialized))
	world, err := mpi.CommWorld()
	require.NoError(t, err)
	self, err := mpi.CommSelf()
	require.NoError(t, err)
	null, err := mpi.CommNull()
	require.NoError(t, err)
	assert.NotZero(t, world)
	assert.NotEqual(t, world, self)
	assert.NotEqual(t, world, null)
	var size, rank int32
	require.NoError(t, mpi.CommSize(world, &size))
	require.NoError(t, mpi.CommRank(world, &rank))
	assert.Equal(t, int32(1), size)
	assert.Equal(t, int32(0), rank)

	for name, tc := range map[string]struct {
		h    func() (mpi.Datatype, error)
		size int32
	}{
		"MPI_FLOAT": {mpi.Float, 4}, "MPI_DOUBLE": {mpi.Double, 8}, "MPI_INT8_T": {mpi.Int8T, 1},
		"MPI_INT64_T": {mpi.Int64T, 8}, "MPI_UINT16_T": {mpi.Uint16T, 2}, "MPI_BYTE": {mpi.Byte, 1},
	} {
		dt, err := tc.h()
		require.NoError(t, err, name)
		var n int32
		require.NoError(t, mpi.TypeSize(dt, &n), name)
		assert.Equal(t, tc.size, n, name)
	}

	require.NoError(t, mpi.CommSetErrhandler(world, must(t, mpi.ErrorsReturn)))
	buf := []float32{1, 2, 3, 4}
	out := make([]float32, 4)
	fl := must(t, mpi.Float)
	require.NoError(t, mpi.Allreduce(unsafe.Pointer(&buf[0]), unsafe.Pointer(&out[0]), 4, fl, must(t, mpi.Sum), world))
	assert.Equal(t, buf, out)
	require.NoError(t, mpi.Allreduce(unsafe.Pointer(&buf[0]), unsafe.Pointer(&out[0]), 4, fl, must(t, mpi.Max), world))
	// In place: InPlacePtr reaches MPI as MPI_IN_PLACE, so one rank's sum leaves the
	// buffer as it was (taken as a send buffer, the sentinel's byte would overwrite it).
	inPlace := []float32{5, 6, 7, 8}
	require.NoError(t, mpi.Allreduce(mpi.InPlacePtr, unsafe.Pointer(&inPlace[0]), 4, fl, must(t, mpi.Sum), world))
	assert.Equal(t, []float32{5, 6, 7, 8}, inPlace, "MPI_Allreduce(MPI_IN_PLACE) on one rank")
	gathered := []int32{0, 0}
	gathered[rank] = 9
	require.NoError(t, mpi.Allgather(mpi.InPlacePtr, 0, must(t, mpi.Int32T), unsafe.Pointer(&gathered[0]), 1, must(t, mpi.Int32T), world))
	assert.Equal(t, []int32{9, 0}, gathered, "MPI_Allgather(MPI_IN_PLACE) on one rank")
	// Bad input reaches the library's own checks and comes back as its error code.
	err = mpi.Allreduce(unsafe.Pointer(&buf[0]), unsafe.Pointer(&out[0]), -1, fl, must(t, mpi.Sum), world)
	var code mpi.ErrorCode
	require.True(t, errors.As(err, &code), "got %v", err)
	assert.Equal(t, mpi.ErrorCode(mpi.ErrCount), code)
	assert.True(t, strings.HasPrefix(err.Error(), "mpi: "), err.Error())
	assert.NotContains(t, err.Error(), "error code", "the loaded library gives the text")

	// A floating result crosses as such: MPI_Wtime advances (Open MPI counts from MPI_Init).
	t0, err := mpi.Wtime()
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	t1, err := mpi.Wtime()
	require.NoError(t, err)
	assert.Greater(t, t1-t0, 0.015)

	cov, err := mpi.Coverage()
	require.NoError(t, err)
	present := map[string]bool{}
	for _, s := range cov {
		present[s.Symbol] = s.Present
	}
	for _, s := range []string{"MPI_Allreduce", "MPI_Comm_split", "ompi_mpi_comm_world", "ompi_mpi_float", "ompi_mpi_op_sum"} {
		assert.True(t, present[s], s)
	}
	require.NoError(t, mpi.Finalize())
}

func must[T any](t *testing.T, f func() (T, error)) T {
	t.Helper()
	v, err := f()
	require.NoError(t, err)
	return v
}

func TestErrorCodeWithoutLibraryIsItsNumber(t *testing.T) {
	if dltest.InChild() {
		assert.Equal(t, "mpi: error code 5", mpi.ErrorCode(mpi.ErrComm).Error())
		assert.ErrorIs(t, error(mpi.ErrorCode(mpi.ErrComm)), mpi.ErrorCode(mpi.ErrComm))
		return
	}
	dltest.RunChild(t, "TestErrorCodeWithoutLibraryIsItsNumber")
}
