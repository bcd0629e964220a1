//go:build cgo

package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/mpi"
)

// ExampleAllReduce sums a Go slice across the ranks of an MPI job: the slice's length is
// the count and the library pins the memory, so no pointer is written. Run alone (no
// mpirun) it is a job of one rank and prints
//
//	1 [0.5 1 1.5]
//	true
//
// under mpirun -np N every rank prints N× its values. It needs Open MPI, so it has no
// Output comment (go test would fail it where Open MPI is missing):
// TestExampleAllReducePrints runs it and checks what it prints, or skips.
func ExampleAllReduce() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := mpi.New(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	grads := []float32{0.5, 1, 1.5}
	if err := mpi.AllReduce(c, grads, comm.Sum); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.WorldSize(), grads)

	// A receive buffer of the wrong length is an error, never an overrun.
	err = mpi.AllGather(c, grads, make([]float32, 2))
	fmt.Println(errors.Is(err, comm.ErrInvalidSize))
}

// TestExampleAllReducePrints runs ExampleAllReduce as a job of one rank, where Open MPI
// is installed, and checks what it prints. It runs alone, in a fresh process, as the
// program would: MPI is initialised once per process.
func TestExampleAllReducePrints(t *testing.T) {
	if !inRank(t) {
		runAlone(t, t.Name())
		return
	}
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stdout := os.Stdout
	os.Stdout = w
	func() {
		defer func() { os.Stdout = stdout }()
		ExampleAllReduce()
	}()
	require.NoError(t, w.Close())
	out, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, "1 [0.5 1 1.5]\ntrue\n", string(out))
}
