package commtest

import (
	"bytes"
	"context"
	"testing"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// CapGrow: a communicator takes in new ranks (Backend.GrowID, Backend.Grow and
// nccl.Join: ncclCommGetUniqueId and ncclCommGrow, NCCL >= 2.29.2), on an Instance
// that can put a newcomer on a rank's device (a DeviceOptioner).
const CapGrow Capability = "grow"

// DeviceOptioner is an Instance that can bring up a backend of its own on rank's
// device: the nccl.Option that makes nccl.Join (or job.Connect) use it. Cluster is one.
type DeviceOptioner interface {
	DeviceOption(rank int) (nccl.Option, error)
}

// growBackend is a backend whose communicator can shrink and grow (*nccl.Backend).
type growBackend interface {
	Shrink(ctx context.Context, exclude []int) (*nccl.Backend, error)
	GrowID() (comm.UniqueID, error)
	Grow(ctx context.Context, world int, id *comm.UniqueID) (*nccl.Backend, error)
}

// grow replaces the last rank the way an elastic job does: ranks 0..n-2 shrink the
// communicator without it, rank 0 makes the grow's id, the survivors grow it back to n
// ranks while a newcomer joins as rank n-1 on the last rank's device, and an all-gather
// over the grown communicator is checked on every rank. A library without the calls
// answers ErrUnsupported on every rank.
func (e *env) grow(t *testing.T) {
	if e.n < 2 {
		t.Skip("grow replaces a rank: it needs a world of 2 ranks at least")
	}
	if e.local != nil {
		e.h.lacking(t, CapGrow, false, "the newcomer must run in this process, and the world spans several")
		return
	}
	bs := backendsAs[growBackend](t, e, CapGrow, "the backend has no Grow")
	devs, ok := e.inst.(DeviceOptioner)
	if !ok {
		e.h.lacking(t, CapGrow, false, "the instance cannot bring up a newcomer (no DeviceOption)")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.h.Timeout)
	defer cancel()
	last := e.n - 1
	shrunk := make([]*nccl.Backend, e.n)
	errs := e.try(t, func(r int) (err error) {
		if r != last {
			shrunk[r], err = bs[r].Shrink(ctx, []int{last})
		}
		return err
	})
	closeAll := func(bs []*nccl.Backend) {
		for _, b := range bs {
			if b != nil {
				_ = b.Close()
			}
		}
	}
	defer closeAll(shrunk)
	if e.skipUnsupported(t, errs[:last], CapGrow, "shrink before the grow") {
		return
	}
	id, err := shrunk[0].GrowID()
	if e.skipUnsupported(t, []error{err}, CapGrow, "grow-id") {
		return
	}
	dev, err := devs.DeviceOption(last)
	if err != nil {
		t.Fatalf("device option of rank %d: %v", last, err)
	}
	grown := make([]*nccl.Backend, e.n)
	defer closeAll(grown)
	e.all(t, func(r int) (err error) {
		switch {
		case r == last:
			if grown[r], err = nccl.Join(ctx, id, last, e.n, dev, nccl.WithElementType(e.elem)); err != nil {
				cancel() // the survivors would wait for the newcomer until the deadline
			}
		case r == 0:
			grown[r], err = shrunk[r].Grow(ctx, e.n, &id)
		default:
			grown[r], err = shrunk[r].Grow(ctx, e.n, nil)
		}
		return err
	})
	// An all-gather of a block tagged with each rank's rank checks every rank of the
	// grown communicator, the newcomer included. (Not an all-reduce: a harness's
	// two-rank add kernel is set on its own backends, not on the newcomer.)
	const block = 256
	send := e.buffers(t, block, func(r int) []byte { return tagged(r, block) })
	recv := e.buffers(t, e.n*block, nil)
	e.all(t, func(r int) error { return grown[r].AllGather(send[r], recv[r], block) })
	var want []byte
	for r := range e.n {
		want = append(want, tagged(r, block)...)
	}
	for r, b := range grown {
		if b.Rank() != r || b.WorldSize() != e.n {
			t.Fatalf("grown rank %d: rank %d of %d", r, b.Rank(), b.WorldSize())
		}
		if got := e.read(t, r, recv[r], e.n*block); !bytes.Equal(got, want) {
			t.Fatalf("all-gather after the grow, rank %d: got %x..., want %x...", r, got[:16], want[:16])
		}
	}
}
