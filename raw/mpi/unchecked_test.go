//go:build cgo

package mpi_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
	"github.com/ncclgo/ncclgo/raw/mpi"
)

// TestMessageBuffersSkipCgoPointerCheckOnly checks gen/mpi.json's uncheckedPointers in a
// singleton MPI (one rank, no mpirun) with cgo's checks on (GODEBUG=cgocheck=1): a message
// buffer (MPI_Bcast's buffer) is passed without cgo's pointer check, so Go memory holding a
// Go pointer gets through, where a parameter the rule does not name (MPI_Comm_get_attr's
// attribute_val) still fails cgo's check before the call; and buffers on goroutine stacks
// and on the heap stay correct while stacks grow and the collector runs between and during
// calls (run it with -race: checkptr also checks each conversion).
func TestMessageBuffersSkipCgoPointerCheckOnly(t *testing.T) {
	if !dltest.InChild() {
		needLibMPI(t)
		dltest.RunChild(t, "TestMessageBuffersSkipCgoPointerCheckOnly", append(singletonEnv, "GODEBUG=cgocheck=1")...)
		return
	}
	needLibMPI(t)
	var provided int32
	require.NoError(t, mpi.InitThread(nil, nil, mpi.ThreadSerialized, &provided))
	world := must(t, mpi.CommWorld)
	require.NoError(t, mpi.CommSetErrhandler(world, must(t, mpi.ErrorsReturn)))
	bytes := must(t, mpi.Byte)

	// Unchecked: MPI_Bcast from root 0 of a one-rank communicator reads nothing and
	// writes nothing, so the call is harmless; it must not panic.
	x := 7
	holder := struct{ p *int }{&x}
	assert.NotPanics(t, func() {
		require.NoError(t, mpi.Bcast(unsafe.Pointer(&holder), int32(unsafe.Sizeof(holder)), bytes, 0, world))
	}, "a message buffer is not checked")
	assert.Same(t, &x, holder.p)

	// Checked: the panic comes from cgo's check in Go, before MPI is called.
	var flag int32
	func() {
		defer func() {
			r := recover()
			require.NotNil(t, r, "attribute_val is not a message buffer: cgo still checks it")
			assert.Contains(t, fmt.Sprint(r), "Go pointer to unpinned Go pointer")
		}()
		_ = mpi.CommGetAttr(world, mpi.TagUb, unsafe.Pointer(&holder), &flag)
	}()

	// Buffers on stacks and on the heap, from several goroutines (one MPI call at a time:
	// MPI_THREAD_SERIALIZED), while the stacks grow between calls and the collector runs.
	sum := must(t, mpi.Sum)
	fl := must(t, mpi.Float)
	stop := make(chan struct{})
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
			}
		}
	}()
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for g := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if err := reduceOnStack(&mu, world, fl, sum, float32(g*1000+i), i%7*64); err != nil {
					errs[g] = err
					return
				}
				heap := make([]float32, 16)
				heap[3] = float32(i)
				out := make([]float32, 16)
				mu.Lock()
				err := mpi.Allreduce(unsafe.Pointer(&heap[0]), unsafe.Pointer(&out[0]), 16, fl, sum, world)
				mu.Unlock()
				if err == nil && out[3] != float32(i) {
					err = fmt.Errorf("heap buffer: got %v, want %v", out[3], i)
				}
				if err != nil {
					errs[g] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-gcDone
	for g, err := range errs {
		assert.NoError(t, err, "goroutine %d", g)
	}
	require.NoError(t, mpi.Finalize())
}

// reduceOnStack grows the stack depth frames deep, then reduces two arrays that live in
// its frame (the binding's trampolines are #cgo noescape: they stay on the stack).
func reduceOnStack(mu *sync.Mutex, world mpi.Comm, fl mpi.Datatype, sum mpi.Op, v float32, depth int) error {
	if depth > 0 {
		return reduceOnStack(mu, world, fl, sum, v, depth-1)
	}
	var in, out [8]float32
	in[5] = v
	mu.Lock()
	err := mpi.Allreduce(unsafe.Pointer(&in[0]), unsafe.Pointer(&out[0]), 8, fl, sum, world)
	mu.Unlock()
	if err == nil && out[5] != v {
		err = fmt.Errorf("stack buffer: got %v, want %v", out[5], v)
	}
	return err
}
