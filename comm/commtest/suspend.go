package commtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ncclgo/ncclgo/comm"
)

// CapSuspend: Suspend and Resume on the backend (ncclCommSuspend/ncclCommResume,
// NCCL >= 2.29.7): while suspended every operation fails at once, after Resume they
// run again.
const CapSuspend Capability = "suspend"

// Suspender is the optional capability of a backend whose library memory can be
// released while idle (nccl.Backend): Suspend until Resume, every rank together.
type Suspender interface {
	Suspend(ctx context.Context) error
	Resume(ctx context.Context) error
}

// suspend suspends every rank, checks that an all-reduce fails at once (within the
// step timeout, never a hang) on each, resumes, and checks an all-reduce's result.
func (e *env) suspend(t *testing.T) {
	ss := make([]Suspender, e.n)
	for r, b := range e.b {
		s, ok := b.(Suspender)
		if !ok {
			e.h.lacking(t, CapSuspend, false, "the backend has no Suspend and Resume")
			return
		}
		ss[r] = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := e.try(t, func(r int) error { return ss[r].Suspend(ctx) })
	if e.skipUnsupported(t, errs, CapSuspend, "suspend") {
		return
	}
	const count = 64
	bytes := count * e.es
	ps := e.buffers(t, bytes, func(r int) []byte { return inputs(comm.Sum, e.elem, e.n, r, 0, count) })
	errs = e.try(t, func(r int) error { return e.b[r].AllReduce(ps[r], bytes) })
	for _, r := range e.ranks() {
		require.True(t, errs[r] != nil, "all-reduce while suspended, rank %d: no error", r)
		require.False(t, errors.Is(errs[r], context.DeadlineExceeded), "rank %d waited instead of failing", r)
	}
	e.all(t, func(r int) error { return ss[r].Resume(ctx) })
	e.all(t, func(r int) error { return e.b[r].AllReduce(ps[r], bytes) })
	for _, r := range e.ranks() {
		checkBytes(t, e.elem, expected(comm.Sum, e.elem, e.n, 0, count), e.read(t, r, ps[r], bytes), "all-reduce after resume, rank %d", r)
	}
}
