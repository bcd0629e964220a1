//go:build !cgo

package mpi

import (
	"context"

	"github.com/ncclgo/ncclgo/raw/dl"
)

// Without cgo there is no MPI, and no progress thread.

const (
	callAllreduce = iota + 1
	callReduce
	callBcast
	callAllgather
	callReduceScatterBlock
	callGather
	callScatter
	callAlltoall
	callAlltoallv
	callTestall
)

type progress struct{}

func (c *Communicator) call(int, ...uintptr) error { return dl.ErrNeedsCgo }

func (c *Communicator) testallOffloaded(context.Context) (bool, int32, error) { return false, 0, nil }

func (p *progress) stop() {}
