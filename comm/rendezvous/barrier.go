package rendezvous

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// GenerationKey returns the conventional key "ncclgo/<group>/gen/<gen>/<name>". Using a
// new generation for each communicator (and for each retry after a failure) keeps a
// stale unique id or a half-finished barrier of an earlier attempt from being seen:
// rank 0 publishes the NCCL unique id under GenerationKey(group, gen, "uid"), the others
// Get it, and all ranks Barrier on GenerationKey(group, gen, "barrier").
func GenerationKey(group string, gen uint64, name string) string {
	return "ncclgo/" + group + "/gen/" + strconv.FormatUint(gen, 10) + "/" + name
}

// missingCheckTimeout bounds the look-up of missing ranks after a barrier's context
// has already ended.
const missingCheckTimeout = 5 * time.Second

// Barrier returns once every rank in [0, world) has called Barrier with the same key
// and world, each exactly once, or fails when ctx ends with a [*BarrierError] that lists
// the ranks that never arrived (and wraps ctx's error).
//
// The server counts the ranks itself: barriers live apart from the keys, so no Set,
// Add or Delete can complete, block or break one. A rank that arrives while the same
// rank already waits at the barrier (two processes claiming one rank), a world that
// differs from the one the first rank gave, and an arrival after the barrier completed
// (a reused key: use GenerationKey) are errors wrapping ErrInvalidArgument that name
// the rank, returned to the caller that made them; the barrier goes on waiting for the
// right ranks. Where the server knows the job's world (WithWorld: comm's rank 0,
// tools/rendezvous -world), an arrival for any other world is refused the same way
// and creates nothing, so that no client can make the job's barrier keys wait for a
// world of its choosing or complete them early. A rank whose call ended (its context, its connection) still counts as
// arrived and may arrive again without being counted twice.
func (c *Client) Barrier(ctx context.Context, key string, rank, world int) error {
	switch {
	case world < 1 || world > maxBarrierWorld:
		return fmt.Errorf("barrier %q: %w: world size %d, want 1..%d", key, ErrInvalidArgument, world, maxBarrierWorld)
	case rank < 0 || rank >= world:
		return fmt.Errorf("barrier %q: %w: rank %d outside [0, %d)", key, ErrInvalidArgument, rank, world)
	}
	if err := checkKey(key); err != nil {
		return fmt.Errorf("barrier %q: %w", key, err)
	}
	_, err := c.call(ctx, opBarrier, true, func(e *encoder) {
		e.string(key)
		e.uint64(uint64(rank))
		e.uint64(uint64(world))
	})
	if err != nil {
		return c.barrierFailed(ctx, key, world, err)
	}
	return nil
}

// barrierFailed names the ranks that never arrived when the wait ended because of ctx;
// any other failure (a lost connection, a duplicate rank) is returned as it is.
func (c *Client) barrierFailed(ctx context.Context, key string, world int, cause error) error {
	if ctx.Err() == nil || !errors.Is(cause, ctx.Err()) {
		return fmt.Errorf("barrier %q on %s: %w", key, c.addr, cause)
	}
	return barrierTimedOut(ctx, key, c.addr, world, cause, c.missingRanks)
}

// barrierTimedOut is the [*BarrierError] of a barrier whose ctx ended, listing the
// missing ranks (asked for under a context of its own).
func barrierTimedOut(ctx context.Context, key, addr string, world int, cause error, missingRanks func(ctx context.Context, key string, world int) ([]int, error)) error {
	checkCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), missingCheckTimeout)
	defer cancel()
	missing, err := missingRanks(checkCtx, key, world)
	if err != nil {
		return fmt.Errorf("barrier %q on %s: %w (listing the missing ranks failed: %v)", key, addr, cause, err)
	}
	return &BarrierError{Key: key, World: world, Missing: missing, Err: ctx.Err()}
}

// encodeBarrierState is what a server answers about a barrier: its world, flags (1
// some rank arrived, 2 done) and the bitmap of the ranks that arrived.
func encodeBarrierState(world int, arrived []bool, done, found bool) (w uint64, flags byte, bitmap []byte) {
	if found {
		flags |= 1
	}
	if done {
		flags |= 2
	}
	bitmap = make([]byte, (len(arrived)+7)/8)
	for r, ok := range arrived {
		if ok {
			bitmap[r/8] |= 1 << (r % 8)
		}
	}
	return uint64(world), flags, bitmap
}

// missingRanks asks the server which ranks have not arrived at the barrier.
func (c *Client) missingRanks(ctx context.Context, key string, world int) ([]int, error) {
	r, err := c.call(ctx, opBarrierState, false, func(e *encoder) { e.string(key) })
	if err != nil {
		return nil, err
	}
	if len(r.fields) != 3 || len(r.fields[0]) != 1 || len(r.fields[1]) != 8 {
		return nil, fmt.Errorf("%w: malformed barrier state reply", ErrProtocol)
	}
	return missingFromState(key, world, r.fields[0][0], binary.BigEndian.Uint64(r.fields[1]), r.fields[2])
}

// missingFromState lists the ranks of world missing from a barrier state: its flags
// (1 some rank arrived, 2 done), its world and the bitmap of the ranks that arrived.
func missingFromState(key string, world int, flags byte, w uint64, bitmap []byte) ([]int, error) {
	missing := []int{}
	switch {
	case flags&1 == 0: // nobody arrived
		for i := range world {
			missing = append(missing, i)
		}
		return missing, nil
	case flags&2 != 0: // completed
		return missing, nil
	case w != uint64(world):
		return nil, fmt.Errorf("%w: barrier %q is for %d ranks, not %d", ErrInvalidArgument, key, w, world)
	}
	for i := range world {
		if i/8 >= len(bitmap) || bitmap[i/8]&(1<<(i%8)) == 0 {
			missing = append(missing, i)
		}
	}
	return missing, nil
}
