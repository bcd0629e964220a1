//go:build cgo

package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/mpi"
)

// ExampleAllReduce sums a Go slice across the ranks of an MPI job: the slice's length is
// the count and the library pins the memory, so no pointer is written. Run alone (no
// mpirun) it is a job of one rank; under mpirun -np N every rank prints N× its values.
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
	// Output:
	// 1 [0.5 1 1.5]
	// true
}
