package comm_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/ncclgo/ncclgo/comm"
)

// An engine written against comm.Backend runs unchanged on one GPU with comm.Single.
func ExampleSingle() {
	b, err := comm.NewSingle(comm.WithElementType(comm.BFloat16))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	const hidden comm.DevicePtr = 0x7f0000000000 // a device buffer the engine owns
	if err := b.AllReduce(hidden, 4096); err != nil {
		log.Fatal(err)
	}
	fmt.Println("rank", b.Rank(), "of", b.WorldSize())

	// Bad input is an error that says what was wrong, never a panic.
	err = b.AllReduce(hidden, 4095)
	fmt.Println(err)
	fmt.Println(errors.Is(err, comm.ErrInvalidSize))

	// Backends without a symmetric allocator say so; callers fall back.
	if _, err := b.SymmetricAlloc(1 << 20); errors.Is(err, comm.ErrUnsupported) {
		fmt.Println("no symmetric memory: use a plain allocation")
	}
	// Output:
	// rank 0 of 1
	// all-reduce on rank 0: bytes 4095: invalid size: not a multiple of 2 (bfloat16)
	// true
	// no symmetric memory: use a plain allocation
}

// loopback is a user's backend: only the required methods (Core).
type loopback struct{ rank, world int }

func (l loopback) AllReduce(comm.DevicePtr, int) error                     { return nil }
func (l loopback) AllGather(comm.DevicePtr, comm.DevicePtr, int) error     { return nil }
func (l loopback) ReduceScatter(comm.DevicePtr, comm.DevicePtr, int) error { return nil }
func (l loopback) Broadcast(comm.DevicePtr, int, int) error                { return nil }
func (l loopback) Barrier() error                                          { return nil }
func (l loopback) SendTo(comm.DevicePtr, int, int, comm.Stream) error      { return nil }
func (l loopback) RecvFrom(comm.DevicePtr, int, int, comm.Stream) error    { return nil }
func (l loopback) Rank() int                                               { return l.rank }
func (l loopback) WorldSize() int                                          { return l.world }

// A backend written outside comm implements the required methods (comm.Core), gets the
// defaults from comm.Base and comm's validation from comm.Validate.
func ExampleValidate() {
	b, err := comm.Validate(comm.Base{Core: loopback{rank: 1, world: 2}}, comm.WithElementType(comm.Float32))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	h, err := b.RegisterBuffer(0x1000, 256) // Base's default: handle 0
	fmt.Println(h, err)
	fmt.Println(b.DeregisterBuffer(h))
	fmt.Println(b.DeregisterBuffer(h))
	fmt.Println(b.SendTo(0x1000, 64, 2, 0))
	fmt.Println(b.RecvCommandU32(context.Background(), 0x1000, 1))
	// Output:
	// 0 <nil>
	// <nil>
	// deregister-buffer on rank 1: handle 0: unknown buffer handle: not returned by register-buffer or already deregistered
	// send on rank 1: dest 2: invalid rank: world size is 2
	// recv-command on rank 1: root 1: invalid rank: root is this rank; it sends with broadcast
}

// The typed Communicator of one rank.
func ExampleNoOp() {
	var c comm.Communicator = comm.NewNoOp()
	defer c.Close()
	fmt.Println(c.AllReduce(0x1000, 128, comm.Float16, comm.Max))
	fmt.Println(c.Sync(context.Background()))
	_, err := c.Split(context.Background(), 0, 0)
	fmt.Println(errors.Is(err, comm.ErrUnsupported))
	_, isStreamSyncer := c.(comm.StreamSyncer)
	fmt.Println(isStreamSyncer)
	// Output:
	// <nil>
	// <nil>
	// true
	// false
}

// InGroup runs a function inside a group and submits what it issued, or discards the
// group when the function fails: the goroutine never leaves a group open behind it. On
// a one-rank backend groups only count levels; on NCCL the function's operations are
// launched together by the GroupEnd that InGroup makes.
func ExampleInGroup() {
	b, err := comm.NewSingle(comm.WithElementType(comm.Float32))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	err = comm.InGroup(b, func() error {
		if err := b.AllReduce(0x10000, 64); err != nil {
			return err
		}
		return b.AllReduce(0x20000, 3) // not a multiple of 4: the group is discarded
	})
	fmt.Println(errors.Is(err, comm.ErrInvalidSize))
	fmt.Println(errors.Is(b.GroupEnd(), comm.ErrGroupNotOpen)) // nothing left open
	// Output:
	// true
	// true
}
