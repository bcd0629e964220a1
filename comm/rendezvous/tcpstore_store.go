package rendezvous

import (
	"context"
	"fmt"
	"strconv"
)

// Store is what a rank does with its job's key-value store: *Client (ncclgo's
// protocol) and *TCPStoreClient (PyTorch's TCPStore, e.g. torchrun's agent store)
// implement it. Get and Wait block until their keys exist or ctx ends; Add keeps a
// decimal int64 counter; CompareAndSet with old nil creates key only if it is absent.
type Store interface {
	Set(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
	Add(ctx context.Context, key string, delta int64) (int64, error)
	CompareAndSet(ctx context.Context, key string, old, new []byte) (current []byte, swapped bool, err error)
	Wait(ctx context.Context, keys ...string) error
	Check(ctx context.Context, keys ...string) ([]bool, error)
	Delete(ctx context.Context, key string) (bool, error)
	// Barrier returns once all world ranks have called it with the same key, or fails
	// with a [*BarrierError] naming the ranks that never arrived when ctx ends.
	Barrier(ctx context.Context, key string, rank, world int) error
	Close() error
}

var _ Store = (*Client)(nil)

// barrierSuffixLen bounds what storeBarrier appends to its key ("/rank/<r>", "/count").
const barrierSuffixLen = 32

// rankKey is the marker key of rank at the barrier key.
func rankKey(key string, rank int) string { return key + "/rank/" + strconv.Itoa(rank) }

// storeBarrier is a barrier built from keys over any Store, for stores without
// barriers of their own (PyTorch's TCPStore), one call at a time: the rank's marker,
// the count, the last rank's "/done", then the wait for it. It meets the barriers of
// other storeBarrier callers on the same key, not the server-side ones of
// Client.Barrier.
func storeBarrier(ctx context.Context, s Store, key string, rank, world int) error {
	switch {
	case world < 1:
		return fmt.Errorf("barrier %q: %w: world size %d, want at least 1", key, ErrInvalidArgument, world)
	case rank < 0 || rank >= world:
		return fmt.Errorf("barrier %q: %w: rank %d outside [0, %d)", key, ErrInvalidArgument, rank, world)
	case len(key) > MaxKeyLen-barrierSuffixLen:
		return fmt.Errorf("barrier %q: %w: key of %d bytes exceeds the limit of %d", key, ErrInvalidArgument, len(key), MaxKeyLen-barrierSuffixLen)
	}
	if err := checkKey(key); err != nil {
		return fmt.Errorf("barrier %q: %w", key, err)
	}
	failed := func(err error) error {
		if ctx.Err() == nil {
			return fmt.Errorf("barrier %q: %w", key, err)
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), missingCheckTimeout)
		defer cancel()
		keys := make([]string, world)
		for r := range keys {
			keys[r] = rankKey(key, r)
		}
		present, cerr := s.Check(cctx, keys...)
		if cerr != nil {
			return fmt.Errorf("barrier %q: %w (listing missing ranks failed: %v)", key, err, cerr)
		}
		missing := []int{}
		for r, ok := range present {
			if !ok {
				missing = append(missing, r)
			}
		}
		return &BarrierError{Key: key, World: world, Missing: missing, Err: ctx.Err()}
	}
	if err := s.Set(ctx, rankKey(key, rank), []byte{1}); err != nil {
		return failed(err)
	}
	n, err := s.Add(ctx, key+"/count", 1)
	if err != nil {
		return failed(err)
	}
	switch {
	case n > int64(world):
		return fmt.Errorf("barrier %q: %w: %d arrivals for world size %d (key reused?)", key, ErrInvalidArgument, n, world)
	case n == int64(world):
		if err := s.Set(ctx, key+"/done", []byte{1}); err != nil {
			return failed(err)
		}
	}
	if err := s.Wait(ctx, key+"/done"); err != nil {
		return failed(fmt.Errorf("wait for %q (%s of %s arrived): %w", key+"/done", strconv.FormatInt(n, 10), strconv.Itoa(world), err))
	}
	return nil
}
