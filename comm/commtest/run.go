package commtest

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
)

// RunRanks calls f once for every element of ranks, with the element's index as the
// rank, each call in its own goroutine as separate processes would run, and waits until
// every call has returned or ctx is done. ranks is typically Cluster.NCCLs (f then gets
// each rank's *nccl.Backend, with Split and Shrink), Cluster.Backends or
// Cluster.Communicators. It returns nil when every call returned nil, else a
// *RanksError: each rank's error and, when ctx ended first, the ranks still running.
//
// f gets a context derived from ctx that is canceled, with the first failure as its
// cause (context.Cause), as soon as one call returns an error or panics: the other
// ranks' waits end instead of running out their timeouts. A call that panics is
// recovered and reported as that rank's error (it matches ErrRankPanicked and holds
// the panic value and stack); the test binary keeps running.
//
// Calls still running when ctx ends keep running in the background, and the
// RanksError names their ranks (Running); end them the way the test ends a hung rank
// (closing the Cluster, aborting the communicators).
func RunRanks[T any](ctx context.Context, ranks []T, f func(ctx context.Context, rank int, v T) error) error {
	type result struct {
		rank int
		err  error
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan result, len(ranks)) // buffered: a call that ends after ctx does not block
	for r, v := range ranks {
		go func() {
			err := callRank(rctx, r, v, f)
			if err != nil {
				cancel(fmt.Errorf("rank %d failed: %w", r, err))
			}
			done <- result{r, err}
		}()
	}
	errs := make([]error, len(ranks))
	running := make([]bool, len(ranks))
	for r := range running {
		running[r] = true
	}
	left := len(ranks)
	record := func(res result) {
		running[res.rank], errs[res.rank] = false, res.err
		left--
	}
	for left > 0 {
		select {
		case res := <-done:
			record(res)
			continue
		case <-ctx.Done():
		}
		for drained := false; !drained && left > 0; { // calls that have returned did not hang
			select {
			case res := <-done:
				record(res)
			default:
				drained = true
			}
		}
		if left == 0 {
			break
		}
		e := &RanksError{Errs: errs, Cause: context.Cause(ctx)}
		for r, on := range running {
			if on {
				e.Running = append(e.Running, r)
			}
		}
		return e
	}
	for _, err := range errs {
		if err != nil {
			return &RanksError{Errs: errs}
		}
	}
	return nil
}

// ErrRankPanicked is matched (errors.Is) by the error of a RunRanks call that panicked.
var ErrRankPanicked = errors.New("rank panicked")

// callRank calls f for rank, recovering a panic as the rank's error.
func callRank[T any](ctx context.Context, r int, v T, f func(ctx context.Context, rank int, v T) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrRankPanicked, p, debug.Stack())
		}
	}()
	return f(ctx, r, v)
}

// RanksError is RunRanks' error, for errors.As; errors.Is sees through it to every
// rank's error and to the context's cause.
type RanksError struct {
	// Errs holds what each rank's call returned, index = rank (nil for a call that
	// returned nil or had not returned).
	Errs []error
	// Running lists, in ascending order, the ranks whose call had not returned when the
	// context ended: the ranks that hang. Empty when every call returned.
	Running []int
	// Cause is the context's cause when Running is not empty, else nil.
	Cause error
}

// Error lists the ranks still running, then each failed rank's error:
// "ranks [2] still running: context deadline exceeded; rank 0: ...".
func (e *RanksError) Error() string {
	var parts []string
	if len(e.Running) > 0 {
		parts = append(parts, fmt.Sprintf("ranks %v still running: %v", e.Running, e.Cause))
	}
	for r, err := range e.Errs {
		if err != nil {
			parts = append(parts, fmt.Sprintf("rank %d: %v", r, err))
		}
	}
	return strings.Join(parts, "; ")
}

// Unwrap returns every rank's error, then the context's cause.
func (e *RanksError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	if e.Cause != nil {
		out = append(out, e.Cause)
	}
	return out
}
