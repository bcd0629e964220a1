//go:build cgo

package mpi_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/mpi"
)

// TestMPIFlightRecorderOnByDefault: without the option the MPI communicator records
// (flightrec.DefaultEntries per communicator); PyTorch's TORCH_NCCL_TRACE_BUFFER_SIZE=0
// turns it off, and the option wins over the environment.
func TestMPIFlightRecorderOnByDefault(t *testing.T) {
	if !inRank(t) {
		runMPI(t, 2, t.Name(), "NCCLGO_TEST_FR=default")
		runMPI(t, 2, t.Name(), "NCCLGO_TEST_FR=env-off", "TORCH_NCCL_TRACE_BUFFER_SIZE=0")
		runMPI(t, 2, t.Name(), "NCCLGO_TEST_FR=option", "TORCH_NCCL_TRACE_BUFFER_SIZE=0")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var opts []mpi.Option
	mode := os.Getenv("NCCLGO_TEST_FR")
	if mode == "option" {
		opts = append(opts, mpi.WithFlightRecorder(7))
	}
	c, err := mpi.New(ctx, opts...)
	require.NoError(t, err)
	defer c.Close()
	switch mode {
	case "default":
		require.NotNil(t, c.FlightRecorder())
		assert.Equal(t, flightrec.DefaultEntries, c.FlightRecorder().Config().Entries)
	case "env-off":
		assert.Nil(t, c.FlightRecorder())
	case "option":
		require.NotNil(t, c.FlightRecorder())
		assert.Equal(t, 7, c.FlightRecorder().Config().Entries)
	default:
		t.Fatalf("NCCLGO_TEST_FR=%s", strconv.Quote(mode))
	}
}
