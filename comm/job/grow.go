package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// The grow protocol. A job's communicator (after a Shrink, say) takes newcomers in
// with Backend.Grow: its rank 0, the grow's root, makes the grow's unique id and sets,
// for each newcomer rank r, the key growKey(base, r) to the id followed by the name of
// the group the grown communicator reconnects under; base is the group the job's
// communicators were created under (WithName, "default" without), before any
// "/shrink" or "/grow" that Shrink and Grow add. A newcomer process (Job.JoinGrow)
// waits for its key, deletes it (an id serves one grow) and joins the grow. A key that
// no newcomer took is overwritten by the next grow.

// growKey is the store key where newcomer rank finds the unique id of the grow of
// the communicators of group base.
func growKey(base string, rank int) string {
	return "ncclgo/" + base + "/grow/rank/" + strconv.Itoa(rank)
}

// baseGroup is the group a Shrink's or Grow's group derives from.
func baseGroup(group string) string {
	for _, sep := range []string{"/shrink", "/grow"} {
		if i := strings.Index(group, sep); i >= 0 {
			group = group[:i]
		}
	}
	return group
}

var _ ncclcfg.Grower = (*member)(nil)

// OfferGrow publishes the grow's id and the grown communicator's group for the
// newcomers [from, world).
func (m *member) OfferGrow(ctx context.Context, id comm.UniqueID, from, world int) error {
	s, err := m.job.client(ctx)
	if err != nil {
		return fmt.Errorf("group %q: %w", m.group, err)
	}
	val := append(slices.Clone(id[:]), m.grownGroup()...)
	for r := from; r < world; r++ {
		if err := s.Set(ctx, growKey(baseGroup(m.group), r), val); err != nil {
			m.job.lost(s, err)
			return fmt.Errorf("group %q: offer the grow to rank %d: %w", m.group, r, err)
		}
	}
	return nil
}

// grownGroup names the group of the communicator m's next Grow makes.
func (m *member) grownGroup() string {
	return fmt.Sprintf("%s/grow%d", m.group, m.generation())
}

// Grown gives the backend of a Grow of m's communicator its own place in the job: the
// group "<group>/grow<generation>", whose generation 0 it is, for its
// AttemptReconnect, and a reference on the Job when m's backend holds one.
func (m *member) Grown(rank, world int) (ncclcfg.Member, bool) {
	nm := &member{job: m.job, group: m.grownGroup(), rank: rank, world: world, newID: m.newID}
	m.job.advance(nm.group, 1)
	m.mu.Lock()
	owns := m.owns
	m.mu.Unlock()
	if owns {
		m.job.retain()
	}
	return nm, owns
}

// JoinGrow brings this process into a communicator of the job that its existing ranks
// grow (nccl.Backend.Grow) to the job's world size, as the newcomer of the job's rank:
// it waits in the store for the grow's unique id (until ctx ends), then joins with
// nccl.Join on the device of its local rank (or WithDevice's). The communicators are
// those of the group of WithName ("default" without), as for NewNCCL. The backend's
// AttemptReconnect meets the grown communicator's other ranks. opts apply after
// JoinJob's.
func (j *Job) JoinGrow(ctx context.Context, opts ...nccl.Option) (*nccl.Backend, error) {
	cfg := ncclcfg.New(append(slices.Clone(j.opts), opts...))
	rank, world := j.cfg.Rank, j.cfg.WorldSize
	const op = "grow"
	if err := core.CheckWorld(op, rank, world, cfg.Elem, "nccl.WithElementType"); err != nil {
		return nil, err
	}
	if j.isClosed() {
		return nil, &comm.ArgError{Op: op, Arg: "job", Value: j.cfg.Addr(), Err: comm.ErrClosed}
	}
	dev := ncclcfg.JobDevice(cfg, j.cfg.LocalRank)
	d, err := ncclcfg.DriverFor(cfg, dev, rank)
	if err != nil {
		return nil, &comm.OpError{Op: op, Bytes: -1, Rank: rank, GlobalRank: rank, Err: fmt.Errorf("open device %d: %w", dev, err)}
	}
	base := cfg.Name
	if base == "" {
		base = defaultGroup
	}
	start := time.Now()
	id, group, err := j.takeGrow(ctx, growKey(base, rank))
	if err != nil {
		return nil, &comm.OpError{Op: opRendezvous, Bytes: -1, Rank: rank, GlobalRank: rank, Err: err}
	}
	m := &member{job: j, group: group, rank: rank, world: world, newID: d.GetUniqueID}
	j.advance(group, 1)
	cfg.Reconnect = m.Reconnect
	cfg.Job.Member = m
	b, err := nccl.Join(ctx, id, rank, world, ncclcfg.Use(cfg, d))
	if err != nil {
		return nil, err
	}
	j.log.Info("comm: joined a grow", "rank", rank, "world", world, "group", group, "elapsed", time.Since(start))
	return b, nil
}

// takeGrow waits for the grow offer at key and takes it.
func (j *Job) takeGrow(ctx context.Context, key string) (comm.UniqueID, string, error) {
	s, err := j.client(ctx)
	if err != nil {
		return comm.UniqueID{}, "", err
	}
	if err := s.Wait(ctx, key); err != nil {
		j.lost(s, err)
		return comm.UniqueID{}, "", fmt.Errorf("wait for a grow at %q: %w", key, err)
	}
	val, err := s.Get(ctx, key)
	if err == nil {
		_, err = s.Delete(ctx, key)
	}
	if err != nil {
		j.lost(s, err)
		return comm.UniqueID{}, "", fmt.Errorf("take the grow at %q: %w", key, err)
	}
	var id comm.UniqueID
	if len(val) <= len(id) {
		return comm.UniqueID{}, "", fmt.Errorf("grow at %q: %w", key, errors.New("malformed offer"))
	}
	copy(id[:], val)
	return id, string(val[len(id):]), nil
}

// ConnectGrow brings this process into a running job as a newcomer in one call:
// JoinJob, then Job.JoinGrow. The backend owns the Job, as Connect's does.
func ConnectGrow(ctx context.Context, opts ...Option) (*nccl.Backend, error) {
	j, err := JoinJob(ctx, opts...)
	if err != nil {
		return nil, err
	}
	b, err := j.JoinGrow(ctx, func(c *ncclcfg.Config) { c.Job.Owns = true })
	if err != nil {
		if cerr := j.Close(); cerr != nil {
			j.log.Warn("comm: close job after failed grow", "err", cerr)
		}
		return nil, err
	}
	return b, nil
}
