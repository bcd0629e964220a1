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

// barrierSuffixLen bounds what Barrier appends to its key ("/rank/<r>", "/count").
const barrierSuffixLen = 32

// missingCheckTimeout bounds the look-up of missing ranks after a barrier's context
// has already ended.
const missingCheckTimeout = 5 * time.Second

// Barrier returns once all world ranks have called Barrier with the same key, or fails
// when ctx ends with a [*BarrierError] that lists the ranks that never arrived (and
// wraps ctx's error). The key must be new for every barrier (use GenerationKey); rank
// must be in [0, world). Under key it keeps "/rank/<r>" markers (who arrived), a
// "/count" counter and a "/done" flag set by the last rank to arrive.
func (c *Client) Barrier(ctx context.Context, key string, rank, world int) error {
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
	// One write carries the arrival marker, the count and the wait for the last rank;
	// the server handles them in that order.
	marker, err := c.start(ctx, opSet, false, func(e *encoder) { e.string(rankKey(key, rank)); e.bytes([]byte{1}) })
	if err != nil {
		return c.barrierFailed(ctx, key, world, err)
	}
	count, err := c.start(ctx, opAdd, false, func(e *encoder) { e.string(key + "/count"); e.uint64(1) })
	if err != nil {
		marker.abandon()
		return c.barrierFailed(ctx, key, world, err)
	}
	done, err := c.start(ctx, opWait, true, func(e *encoder) { e.string(key + "/done") })
	if err != nil {
		marker.abandon()
		count.abandon()
		return c.barrierFailed(ctx, key, world, err)
	}
	if _, err := marker.await(ctx); err != nil {
		count.abandon()
		done.abandon()
		return c.barrierFailed(ctx, key, world, fmt.Errorf("set %q: %w", rankKey(key, rank), err))
	}
	r, err := count.await(ctx)
	if err == nil && (len(r.fields) != 1 || len(r.fields[0]) != 8) {
		err = fmt.Errorf("%w: malformed reply", ErrProtocol)
	}
	if err != nil {
		done.abandon()
		return c.barrierFailed(ctx, key, world, fmt.Errorf("add 1 to %q: %w", key+"/count", err))
	}
	switch n := int64(binary.BigEndian.Uint64(r.fields[0])); {
	case n > int64(world):
		done.abandon()
		return fmt.Errorf("barrier %q: %w: %d arrivals for world size %d (key reused?)", key, ErrInvalidArgument, n, world)
	case n == int64(world):
		if err := c.Set(ctx, key+"/done", []byte{1}); err != nil {
			done.abandon()
			return c.barrierFailed(ctx, key, world, err)
		}
	}
	if _, err := done.await(ctx); err != nil {
		return c.barrierFailed(ctx, key, world, fmt.Errorf("wait for %q on %s: %w", key+"/done", c.addr, err))
	}
	return nil
}

func rankKey(key string, rank int) string { return key + "/rank/" + strconv.Itoa(rank) }

// barrierFailed names the ranks that never arrived when the wait ended because of ctx;
// any other failure (a lost connection) is returned as it is.
func (c *Client) barrierFailed(ctx context.Context, key string, world int, cause error) error {
	if ctx.Err() == nil || !errors.Is(cause, ctx.Err()) {
		return fmt.Errorf("barrier %q: %w", key, cause)
	}
	checkCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), missingCheckTimeout)
	defer cancel()
	missing, err := c.missingRanks(checkCtx, key, world)
	if err != nil {
		return fmt.Errorf("barrier %q: %w (listing missing ranks failed: %v)", key, cause, err)
	}
	return &BarrierError{Key: key, World: world, Missing: missing, Err: ctx.Err()}
}

// missingRanks checks the rank markers in batches that fit a frame.
func (c *Client) missingRanks(ctx context.Context, key string, world int) ([]int, error) {
	perKey := len(key) + barrierSuffixLen + 4
	batch := min(MaxKeysPerRequest, (MaxFrameLen-frameHeaderLen)/perKey)
	missing := []int{}
	keys := make([]string, 0, min(batch, world))
	for lo := 0; lo < world; lo += batch {
		keys = keys[:0]
		for r := lo; r < min(lo+batch, world); r++ {
			keys = append(keys, rankKey(key, r))
		}
		present, err := c.Check(ctx, keys...)
		if err != nil {
			return nil, err
		}
		for i, ok := range present {
			if !ok {
				missing = append(missing, lo+i)
			}
		}
	}
	return missing, nil
}
