package comm

import (
	"context"
	"fmt"
	"slices"

	"github.com/ncclgo/ncclgo/comm/internal/seam"
)

// NCCL versions of the fault-tolerance calls.
const (
	versionShrink = 22703 // ncclCommShrink, NCCL_SHRINK_ABORT
	versionRevoke = 22807 // ncclCommRevoke
)

// Shrink lets the surviving ranks continue without the ranks in exclude (typically
// dead ones): it stops the work in flight on this communicator (ncclCommRevoke on
// NCCL >= 2.28.7; NCCL_SHRINK_ABORT on 2.27) and creates, with ncclCommShrink, a
// communicator of the remaining ranks. Every remaining rank calls it, at the same time
// and with the same list; the excluded ranks do not. With an NCCL older than 2.27 it
// returns ErrUnsupported saying so.
//
// The new backend numbers the remaining ranks in their old order without gaps: its
// Rank and WorldSize report this rank's new place (ShrunkRank computes it). It keeps
// the element type, the add kernel (SetAddKernel) and the options; on a backend from a
// Job, its AttemptReconnect meets the other survivors under the group name
// "<group>/shrink<generation>". Registrations and symmetric allocations stay with this
// backend, which stays open (and unhealthy) until Close: close it once the new one is
// in use.
func (b *NCCL) Shrink(ctx context.Context, exclude []int) (*NCCL, error) {
	c := b.c
	const op = "shrink"
	if err := c.g.outsideGroup(op); err != nil {
		return nil, err
	}
	if _, ok := c.d.(seam.CommInfo); !ok || c.version < versionShrink {
		return nil, &ArgError{Op: op, Arg: "nccl version", Value: c.version, Err: ErrUnsupported,
			Reason: fmt.Sprintf("ncclCommShrink needs NCCL ≥ 2.27 (loaded %s) and a driver reporting rank and size", versionString(c.version))}
	}
	if err := c.checkExclude(op, exclude); err != nil {
		return nil, err
	}
	abort := true
	if c.version >= versionRevoke {
		if err := c.Revoke(); err != nil {
			c.cfg.log.Warn("comm: revoke before shrink failed; shrinking with NCCL_SHRINK_ABORT", "rank", c.rank, "err", err)
		} else {
			abort = false
		}
	}
	child, err := c.Shrink(ctx, exclude, abort)
	if err != nil {
		return nil, err
	}
	if abort { // NCCL ended this communicator's work: it is done
		c.fail(fmt.Errorf("%w: shrunk with NCCL_SHRINK_ABORT", ErrUnhealthy))
	}
	nb := &NCCL{c: child, elem: b.elem, size: b.size}
	child.onClose = nb.release
	if k := Kernel(b.addKernel.Load()); k != 0 { // every survivor had set it: keep the two-rank path
		if err := nb.SetAddKernel(k); err != nil {
			c.cfg.log.Warn("comm: add kernel not kept after shrink", "rank", child.rank, "err", err)
		}
	}
	child.cfg.reconnect = nil
	child.cfg.job.member = nil
	if m := c.cfg.job.member; m != nil {
		nm := &member{job: m.job, group: fmt.Sprintf("%s/shrink%d", m.group, m.generation()),
			rank: child.rank, world: child.world, newID: m.newID}
		m.job.advance(nm.group, 1) // the shrunk communicator is generation 0 of its group
		child.cfg.reconnect, child.cfg.job.member = nm.reconnect, nm
		m.mu.Lock()
		owns := m.owns
		m.mu.Unlock()
		if owns {
			m.job.retain()
			nb.ownJob()
		}
	}
	c.cfg.log.Info("comm: shrank", "old_rank", c.rank, "old_world", c.world, "rank", child.rank, "world", child.world,
		"excluded", exclude)
	return nb, nil
}

// ShrunkRank returns the rank that rank has after a Shrink that excluded exclude, or
// -1 when rank is excluded itself: ranks keep their order and close the gaps.
func ShrunkRank(rank int, exclude []int) int {
	ex := slices.Clone(exclude)
	slices.Sort(ex)
	n := rank
	for _, r := range slices.Compact(ex) {
		switch {
		case r == rank:
			return -1
		case r < rank:
			n--
		}
	}
	return n
}

// checkExclude validates Shrink's list: ranks of this communicator, each once, not this
// rank.
func (c *NCCLCommunicator) checkExclude(op string, exclude []int) error {
	seen := make(map[int]bool, len(exclude))
	for _, r := range exclude {
		if err := checkRank(op, "exclude", r, c.world); err != nil {
			return err
		}
		if seen[r] {
			return &ArgError{Op: op, Arg: "exclude", Value: r, Err: ErrInvalidRank, Reason: "listed twice"}
		}
		seen[r] = true
	}
	if seen[c.rank] {
		return &ArgError{Op: op, Arg: "exclude", Value: c.rank, Err: ErrInvalidRank, Reason: "excludes this rank"}
	}
	return nil
}

// aborted fails when the communicator was aborted (by the watchdog, or by an
// AttemptReconnect that then failed): what needs the failed communicator cannot run.
func (c *NCCLCommunicator) aborted(op string) error {
	if c.comm != 0 {
		return nil
	}
	return &OpError{Op: op, Bytes: -1, Rank: c.rank,
		Err: fmt.Errorf("%w: the communicator was aborted; only attempt-reconnect and close remain", ErrUnhealthy)}
}

// versionString writes an NCCL version code (22907) as 2.29.7.
func versionString(v int) string {
	return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
}

// ownJob makes b hold a reference on its Job (Connect), dropped when b closes.
func (b *NCCL) ownJob() {
	m := b.c.cfg.job.member
	if m == nil {
		return
	}
	m.mu.Lock()
	m.owns = true
	m.mu.Unlock()
	prev := b.c.onClose
	b.c.onClose = func(ctx context.Context, note func(string, error)) {
		if prev != nil {
			prev(ctx, note)
		}
		note("close job", m.job.Close())
	}
}
