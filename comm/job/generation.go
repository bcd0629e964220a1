package job

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// The generation protocol. Every communicator of a group, and every re-creation of one,
// meets in a new generation G, whose keys are rendezvous.GenerationKey(group, G, name):
//
//	uid       the NCCL unique id; rank 0 creates it if absent, before it arrives
//	uid/<k>   with WithScalableInit's n ids, id k (1 <= k < n), created the same way by
//	          its root rank (rootOf); every rank reads them all once the state is "ok"
//	rank/<r>  rank r's arrival marker, created if absent
//	count     arrivals so far (Add)
//	state     absent while the generation is open; "ok" once every rank arrived (set
//	          by the last one); "restart: ..." when a rank arrived twice (a restarted
//	          process); "abandoned <r> <why>" when rank r stopped waiting
//
// A generation with a state is closed: a rank that looks for one to join takes the
// first without a state, at or after the one that follows its last. Markers and the id
// are created only if absent, so a restarted process can never complete a generation
// that its earlier incarnation joined: it closes that generation, and every rank waiting
// there moves on to the next one with it. A rank that stops waiting (its context ended)
// closes the generation too, so that no late rank completes it; the others then fail at
// once with the same list of missing ranks.
//
// Over ncclgo's own client a rank's arrival is one request, answered once the state
// exists: rendezvous.Client.Arrive, which creates the marker (and rank 0's id), counts
// the rank and, for the last one, sets the state "ok", atomically (joinAtOnce); so is
// it over torch's TCPStore protocol when ncclgo's server serves it
// (rendezvous.TCPStoreClient.Arrive). On torch's own server, which has no such
// request, the same steps are calls one after the other (joinInTurn).

// opRendezvous names the rendezvous step of bring-up and reconnection in errors.
const opRendezvous = "rendezvous"

const (
	stateOK        = "ok"
	stateRestart   = "restart: "
	stateAbandoned = "abandoned "
)

// errGenerationClosed: the generation closed before this rank could join it.
var errGenerationClosed = errors.New("generation closed")

// member is one rank's place in a group of a Job.
type member struct {
	job         *Job
	group       string
	rank, world int
	newID       func() (gpulib.UniqueID, error)
	ids         int // the unique ids the next meeting makes (WithScalableInit); 0: one

	mu   sync.Mutex
	gen  uint64 // the generation of the communicator in use
	owns bool   // the backend holds a reference on job (Connect)
}

// generation is the generation of the communicator in use.
func (m *member) generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

// reconnect is the ReconnectFunc of a Job's backends: a rendezvous in the next
// generation.
func (m *member) Reconnect(ctx context.Context, _ int) (comm.UniqueID, error) {
	ids, err := m.meet(ctx)
	if err != nil {
		return comm.UniqueID{}, fmt.Errorf("%s: %w", opRendezvous, err)
	}
	return ids[0], nil
}

// meet joins the first open generation at or after the next one this process may
// join, moving on when a restarted rank closes it under us, and returns the unique ids
// of the generation it completed (one, or m.ids).
func (m *member) meet(ctx context.Context) ([]comm.UniqueID, error) {
	j := m.job
	if j.isClosed() {
		return nil, fmt.Errorf("group %q: job %w", m.group, comm.ErrClosed)
	}
	s, err := j.client(ctx)
	if err != nil {
		return nil, fmt.Errorf("group %q: %w", m.group, err)
	}
	j.mu.Lock()
	gen := j.next[m.group]
	j.mu.Unlock()
	// A client that arrives at once (joinAtOnce) is told when the generation is
	// closed; on torch's server the rank looks for the first open one first.
	a, err := arriverOf(ctx, s)
	if err != nil {
		j.lost(s, err)
		return nil, fmt.Errorf("group %q: %w", m.group, err)
	}
	for lookup := a == nil; ; lookup = true {
		if lookup {
			if gen, err = m.firstOpen(ctx, s, gen); err != nil {
				j.lost(s, err)
				return nil, fmt.Errorf("group %q: %w", m.group, err)
			}
		}
		ids, err := m.join(ctx, s, a, gen)
		j.lost(s, err)
		if errors.Is(err, errGenerationClosed) {
			j.log.Info("comm: generation closed, joining the next", "rank", m.rank, "group", m.group, "generation", gen, "reason", err)
			gen++
			continue
		}
		j.advance(m.group, gen+1)
		if err != nil {
			return nil, fmt.Errorf("generation %d of group %q: %w", gen, m.group, err)
		}
		m.mu.Lock()
		m.gen = gen
		m.mu.Unlock()
		return ids, nil
	}
}

// advance records that this process may not join generations before next.
func (j *Job) advance(group string, next uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.next[group] = max(j.next[group], next)
}

// firstOpen returns the first generation at or after from that has no state.
func (m *member) firstOpen(ctx context.Context, s rendezvous.Store, from uint64) (uint64, error) {
	const batch = 64
	keys := make([]string, batch)
	for g := from; ; g += batch {
		for i := range keys {
			keys[i] = rendezvous.GenerationKey(m.group, g+uint64(i), "state")
		}
		present, err := s.Check(ctx, keys...)
		if err != nil {
			return 0, err
		}
		for i, p := range present {
			if !p {
				return g + uint64(i), nil
			}
		}
	}
}

func (m *member) key(gen uint64, name string) string {
	return rendezvous.GenerationKey(m.group, gen, name)
}

func rankMarker(r int) string { return "rank/" + strconv.Itoa(r) }

// arriver is a store client that arrives at a countdown latch in one request.
type arriver interface {
	rendezvous.Store
	Arrive(ctx context.Context, a rendezvous.Arrival) (rendezvous.Arrived, error)
}

// arriverOf returns s as an arriver when it can join in one request: ncclgo's client,
// or a TCPStore client of ncclgo's server; else nil.
func arriverOf(ctx context.Context, s rendezvous.Store) (arriver, error) {
	switch c := s.(type) {
	case *rendezvous.Client:
		return c, nil
	case *rendezvous.TCPStoreClient:
		served, err := c.ServesArrivals(ctx)
		if err != nil || !served {
			return nil, err
		}
		return c, nil
	}
	return nil, nil
}

// join arrives in generation gen and waits until every rank has, then returns the ids
// the roots published (rank 0's first); a is s as an arriver, or nil. An error wrapping
// errGenerationClosed means: try the next one.
func (m *member) join(ctx context.Context, s rendezvous.Store, a arriver, gen uint64) ([]comm.UniqueID, error) {
	if a != nil {
		return m.joinAtOnce(ctx, a, gen)
	}
	return m.joinInTurn(ctx, s, gen)
}

// joinAtOnce is join over a client that arrives in one request (ncclgo's own, or a
// TCPStore client of ncclgo's server): the rank arrives at the generation's latch
// (rendezvous.Client.Arrive) in one request, and the store answers it once every
// rank has arrived, with the id. The arrival creates the rank's marker (and on rank 0
// the id) only if absent, counts the rank, and the last arrival sets the state "ok";
// all of it at once, so that a join takes one round trip and the wait instead of the
// four or five of joinInTurn, and no Check of the states before it (an arrival at a
// closed generation is told so, and changes nothing).
//
// The outcome is joinInTurn's: a rank whose marker or id was there before closes the
// generation (without being counted), and a count past the world closes it too.
func (m *member) joinAtOnce(ctx context.Context, s arriver, gen uint64) ([]comm.UniqueID, error) {
	n, mine := m.idCount(), m.rootIndex()
	a := rendezvous.Arrival{Done: m.key(gen, "state"), DoneValue: []byte(stateOK), Counter: m.key(gen, "count"), Target: int64(m.world)}
	marker := rendezvous.KeyValue{Key: m.key(gen, rankMarker(m.rank)), Value: []byte{1}}
	ids := make([]comm.UniqueID, n)
	if mine >= 0 {
		uid, err := m.newID()
		if err != nil {
			return nil, fmt.Errorf("get-unique-id: %w", err)
		}
		ids[mine] = comm.UniqueID(uid)
		a.Create = []rendezvous.KeyValue{{Key: m.idKey(gen, mine), Value: uid[:]}}
	}
	a.Create = append(a.Create, marker)
	for k := range n {
		if k != mine {
			a.Read = append(a.Read, m.idKey(gen, k))
		}
	}
	got, err := s.Arrive(ctx, a)
	if err != nil {
		return nil, m.gaveUp(ctx, s, gen, err)
	}
	switch {
	case got.Closed:
		return nil, fmt.Errorf("%w: %s", errGenerationClosed, got.Done)
	case got.Conflict >= 0 && a.Create[got.Conflict].Key != marker.Key:
		return nil, m.close(ctx, s, gen, fmt.Sprintf("%srank %d found an id published by an earlier rank %d", stateRestart, m.rank, m.rank))
	case got.Conflict >= 0:
		return nil, m.close(ctx, s, gen, fmt.Sprintf("%srank %d had arrived before (a restarted process)", stateRestart, m.rank))
	case got.Count > int64(m.world):
		return nil, m.close(ctx, s, gen, fmt.Sprintf("%s%d arrivals for world size %d", stateRestart, got.Count, m.world))
	}
	if err := m.closedBy(ctx, s, gen, string(got.Done)); err != nil {
		return nil, err
	}
	// State "ok": every rank arrived, the roots with their ids.
	i := 0
	for k := range n {
		if k == mine {
			continue
		}
		if err := readID(&ids[k], a.Read[i], got.Values[i]); err != nil {
			return nil, err
		}
		i++
	}
	return ids, nil
}

// readID copies the unique id v read under key into id.
func readID(id *comm.UniqueID, key string, v []byte) error {
	if len(v) != len(id) {
		return fmt.Errorf("unique id under %q has %d bytes, want %d", key, len(v), len(id))
	}
	copy(id[:], v)
	return nil
}

// idCount is the number of unique ids the meeting makes.
func (m *member) idCount() int { return max(m.ids, 1) }

// idKey is the key of unique id k in generation gen: "uid" for rank 0's, "uid/<k>".
func (m *member) idKey(gen uint64, k int) string {
	if k == 0 {
		return m.key(gen, "uid")
	}
	return m.key(gen, "uid/"+strconv.Itoa(k))
}

// rootIndex is the id this rank creates, -1 for none: with n ids over the world, id k
// is created by the first rank of the k-th of n blocks of consecutive ranks as even as
// can be (the first world%n blocks one rank larger), as NCCL's documentation of
// ncclCommInitRankScalable recommends.
func (m *member) rootIndex() int {
	n := m.idCount()
	big, per := m.world%n, m.world/n // big blocks of per+1 ranks, then blocks of per
	lim := big * (per + 1)
	switch {
	case m.rank < lim && m.rank%(per+1) == 0:
		return m.rank / (per + 1)
	case m.rank >= lim && (m.rank-lim)%per == 0:
		return big + (m.rank-lim)/per
	}
	return -1
}

// joinInTurn is join over a store that answers one request at a time per connection
// and has no countdown latch (torch's own TCPStore server): each call waits for the one before.
func (m *member) joinInTurn(ctx context.Context, s rendezvous.Store, gen uint64) ([]comm.UniqueID, error) {
	nIDs, mine := m.idCount(), m.rootIndex()
	ids := make([]comm.UniqueID, nIDs)
	if mine >= 0 {
		uid, err := m.newID()
		if err != nil {
			return nil, fmt.Errorf("get-unique-id: %w", err)
		}
		_, fresh, err := s.CompareAndSet(ctx, m.idKey(gen, mine), nil, uid[:])
		if err != nil {
			return nil, m.gaveUp(ctx, s, gen, err)
		}
		if !fresh {
			return nil, m.close(ctx, s, gen, fmt.Sprintf("%srank %d found an id published by an earlier rank %d", stateRestart, m.rank, m.rank))
		}
		ids[mine] = comm.UniqueID(uid)
	}
	_, fresh, err := s.CompareAndSet(ctx, m.key(gen, rankMarker(m.rank)), nil, []byte{1})
	if err != nil {
		return nil, m.gaveUp(ctx, s, gen, err)
	}
	if !fresh {
		return nil, m.close(ctx, s, gen, fmt.Sprintf("%srank %d had arrived before (a restarted process)", stateRestart, m.rank))
	}
	n, err := s.Add(ctx, m.key(gen, "count"), 1)
	if err != nil {
		return nil, m.gaveUp(ctx, s, gen, err)
	}
	switch {
	case n > int64(m.world):
		return nil, m.close(ctx, s, gen, fmt.Sprintf("%s%d arrivals for world size %d", stateRestart, n, m.world))
	case n == int64(m.world):
		if _, _, err := s.CompareAndSet(ctx, m.key(gen, "state"), nil, []byte(stateOK)); err != nil {
			return nil, m.gaveUp(ctx, s, gen, err)
		}
	}
	state, err := s.Get(ctx, m.key(gen, "state"))
	if err != nil {
		return nil, m.gaveUp(ctx, s, gen, err)
	}
	if err := m.closedBy(ctx, s, gen, string(state)); err != nil {
		return nil, err
	}
	for k := range nIDs {
		if k == mine {
			continue
		}
		v, err := s.Get(ctx, m.idKey(gen, k))
		if err != nil {
			return nil, err
		}
		if err := readID(&ids[k], m.idKey(gen, k), v); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// close closes generation gen with state (unless it has one already) and returns the
// error that moves this rank on to the next generation.
func (m *member) close(ctx context.Context, s rendezvous.Store, gen uint64, state string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), missingCheckTimeout)
	defer cancel()
	if _, _, err := s.CompareAndSet(cctx, m.key(gen, "state"), nil, []byte(state)); err != nil {
		return fmt.Errorf("close generation %d: %w", gen, err)
	}
	return fmt.Errorf("%w: %s", errGenerationClosed, state)
}

// closedBy interprets the state that ended the wait: nil for "ok", errGenerationClosed
// for a restart (join the next one), and for a rank that gave up the same error it
// returned, naming the ranks that never arrived.
func (m *member) closedBy(ctx context.Context, s rendezvous.Store, gen uint64, state string) error {
	switch {
	case state == stateOK:
		return nil
	case strings.HasPrefix(state, stateAbandoned):
		var who int
		var why string
		if _, err := fmt.Sscanf(state, stateAbandoned+"%d %s", &who, &why); err != nil {
			return fmt.Errorf("generation %d closed: %q", gen, state)
		}
		cause := context.Canceled
		if why == "deadline" {
			cause = context.DeadlineExceeded
		}
		// This rank's context may end now too: list with a context of its own.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), missingCheckTimeout)
		defer cancel()
		return m.missingError(cctx, s, gen, fmt.Errorf("rank %d stopped waiting: %w", who, cause))
	default:
		return fmt.Errorf("%w: %s", errGenerationClosed, state)
	}
}

// missingCheckTimeout bounds the store calls made after the caller's context ended.
const missingCheckTimeout = 5 * time.Second

// gaveUp handles an error of a store call. When the caller's context ended it, the rank
// closes the generation so that no late rank completes it, and returns a
// [*rendezvous.BarrierError] naming the ranks that never arrived.
func (m *member) gaveUp(ctx context.Context, s rendezvous.Store, gen uint64, cause error) error {
	if ctx.Err() == nil {
		return cause
	}
	why := "canceled"
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		why = "deadline"
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), missingCheckTimeout)
	defer cancel()
	state := fmt.Sprintf("%s%d %s", stateAbandoned, m.rank, why)
	if _, _, err := s.CompareAndSet(cctx, m.key(gen, "state"), nil, []byte(state)); err != nil {
		m.job.log.Warn("comm: close abandoned generation", "rank", m.rank, "group", m.group, "generation", gen, "err", err)
	}
	return m.missingError(cctx, s, gen, ctx.Err())
}

// missingError returns a BarrierError listing the ranks without a marker in gen.
func (m *member) missingError(ctx context.Context, s rendezvous.Store, gen uint64, cause error) error {
	missing := []int{}
	const batch = 1024
	keys := make([]string, 0, batch)
	for lo := 0; lo < m.world; lo += batch {
		keys = keys[:0]
		for r := lo; r < min(lo+batch, m.world); r++ {
			keys = append(keys, m.key(gen, rankMarker(r)))
		}
		present, err := s.Check(ctx, keys...)
		if err != nil {
			return fmt.Errorf("%w (listing the missing ranks failed: %v)", cause, err)
		}
		for i, ok := range present {
			if !ok {
				missing = append(missing, lo+i)
			}
		}
	}
	return &rendezvous.BarrierError{Key: strings.TrimSuffix(m.key(gen, ""), "/"), World: m.world, Missing: missing, Err: cause}
}

// Shrunk gives the backend of a Shrink of m's communicator its own place in the job:
// the group "<group>/shrink<generation>", whose generation 0 it is, for its
// AttemptReconnect, and a reference on the Job when m's backend holds one (Connect).
func (m *member) Shrunk(rank, world int) (ncclcfg.Member, bool) {
	nm := &member{job: m.job, group: fmt.Sprintf("%s/shrink%d", m.group, m.generation()),
		rank: rank, world: world, newID: m.newID}
	m.job.advance(nm.group, 1)
	m.mu.Lock()
	owns := m.owns
	m.mu.Unlock()
	if owns {
		m.job.retain()
	}
	return nm, owns
}

// Own records that the backend holds a reference on the job.
func (m *member) Own() {
	m.mu.Lock()
	m.owns = true
	m.mu.Unlock()
}

// Release drops the backend's reference on the job.
func (m *member) Release() error { return m.job.Close() }
