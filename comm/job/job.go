package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// defaultGroup names the store keys of communicators made without WithName.
const defaultGroup = "default"

// Job is this process's place in a job of several processes: its rank, the world size,
// its local rank (which picks its GPU), and a connection to the job's rendezvous store,
// which rank 0 serves unless WithExternalStore says otherwise. A Job creates NCCL
// backends (NewNCCL); each one, and each AttemptReconnect of one, meets the other ranks
// in a new generation of its group (WithName; "default" without), under store keys
// that no earlier generation used. A Job is safe for concurrent use, but a process
// creates one communicator of a group at a time, like every other rank.
type Job struct {
	cfg      rendezvous.Config
	opts     []nccl.Option // WithNCCL (and WithLogger): for every backend the Job creates
	log      *slog.Logger
	server   *rendezvous.Server
	served   chan struct{} // closed when the embedded server stopped serving
	external bool          // WithExternalStore: rank 0 serves no store
	ids      int           // WithScalableInit: the unique ids of a bring-up; 0: one

	mu     sync.Mutex
	store  rendezvous.Store
	agent  string            // under torchrun's agent store: the key prefix (launcher.go)
	broken bool              // store lost its connection: the next rendezvous dials again
	next   map[string]uint64 // per group: the first generation this process may join
	refs   int               // Close and the backends Connect made hold one each
	closed bool
}

// JoinJob reads who this process is and where the job's store is (the environment, or
// WithJob), starts the store on rank 0 (unless WithExternalStore, or under torchrun's
// agent store, see EnvUseAgentStore) and connects to it,
// retrying until ctx ends so that ranks may start in any order. The options also apply
// to every backend the Job creates. Close the Job when its backends are closed.
func JoinJob(ctx context.Context, opts ...Option) (*Job, error) {
	cfg := newOptions(opts)
	jc, err := jobEnv(cfg)
	if err != nil {
		return nil, fmt.Errorf("join job: %w", err)
	}
	if cfg.idsSet && (cfg.ids < 1 || cfg.ids > jc.WorldSize) {
		return nil, fmt.Errorf("join job: %w", &comm.ArgError{Op: core.OpInit, Arg: "scalable init ids", Value: cfg.ids, Err: comm.ErrInvalidSize,
			Reason: fmt.Sprintf("need from 1 to the world size (%d) unique ids", jc.WorldSize)})
	}
	j := &Job{cfg: jc, opts: cfg.nccl, log: cfg.log, next: map[string]uint64{}, refs: 1, external: cfg.external, ids: cfg.ids}
	if j.agent, err = agentStorePrefix(cfg); err != nil {
		return nil, fmt.Errorf("join job: %w", err)
	}
	if jc.Rank == 0 && !cfg.external && j.agent == "" {
		// No TCP keepalives: the store's clients ping it and it closes connections idle
		// for its idle timeout, and the four setsockopt calls they take per connection
		// are a good part of what accepting costs when thousands of ranks dial at once.
		lc := net.ListenConfig{KeepAlive: -1}
		addr := listenAddr(jc)
		l, err := lc.Listen(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("join job as rank 0 of %d: serve the store: %w", jc.WorldSize, err)
		}
		j.server = rendezvous.NewServer(append(jobServerOptions(jc, cfg.log), cfg.torch...)...)
		j.served = make(chan struct{})
		go func() {
			defer close(j.served)
			if err := j.server.Serve(context.Background(), l); err != nil {
				j.log.Error("comm: rendezvous store stopped", "addr", addr, "err", err)
			}
		}()
	}
	j.store, err = j.dial(ctx)
	if err != nil {
		j.shutdown()
		return nil, fmt.Errorf("join job as rank %d of %d: %w", jc.Rank, jc.WorldSize, err)
	}
	return j, nil
}

// jobServerOptions configures the store rank 0 serves for a job of jc.WorldSize ranks.
// Every rank holds a connection for as long as the job runs, and one more while it
// reconnects: the server takes them all, however many ranks the job has. And every rank
// dials at bring-up, all at once: the server takes all their handshakes together, so
// that none waits in the listener's queue for a handshake slot, or is dropped from one
// to make room (and dials again) when handshakes are slow on a loaded rank 0.
func jobServerOptions(jc rendezvous.Config, log *slog.Logger) []rendezvous.ServerOption {
	return []rendezvous.ServerOption{
		rendezvous.WithToken(jc.Token), rendezvous.WithLogger(log),
		rendezvous.WithMaxConns(max(rendezvous.DefaultMaxConns, 2*jc.WorldSize)),
		rendezvous.WithMaxHandshakes(max(rendezvous.DefaultMaxHandshakes, jc.WorldSize)),
		rendezvous.WithWorld(jc.WorldSize),
	}
}

// EnvStorePort names the variable that moves ncclgo's store off MASTER_PORT (and, under
// torchrun's agent store, makes rank 0 serve ncclgo's own store there instead).
const EnvStorePort = "NCCLGO_STORE_PORT"

// jobEnv returns the job's description: WithJob's, or the environment's.
func jobEnv(cfg options) (rendezvous.Config, error) {
	if cfg.job != nil {
		return *cfg.job, cfg.job.Validate()
	}
	v := strings.TrimSpace(os.Getenv(EnvStorePort))
	if v == "" {
		return rendezvous.FromEnv()
	}
	port, err := strconv.Atoi(v)
	if err != nil {
		return rendezvous.Config{}, &rendezvous.ConfigError{Var: EnvStorePort, Value: v, Reason: "not an integer"}
	}
	// The store's host is the environment's (MASTER_ADDR, a Slurm node list, a
	// LeaderWorkerSet's leader, ...): only the port moves.
	env, _ := rendezvous.FromEnv()
	return rendezvous.FromEnv(rendezvous.WithMaster(env.MasterAddr, port))
}

// listenAddr is where rank 0 serves the store: MASTER_ADDR itself when it is an IP
// address or localhost, every interface when it is a host name (which may resolve, on
// rank 0's machine, to an address the other machines do not use).
func listenAddr(c rendezvous.Config) string {
	if net.ParseIP(c.MasterAddr) != nil || c.MasterAddr == "localhost" {
		return c.Addr()
	}
	return net.JoinHostPort("", strconv.Itoa(c.MasterPort))
}

// Rank is this process's rank (RANK).
func (j *Job) Rank() int { return j.cfg.Rank }

// WorldSize is the number of processes (WORLD_SIZE).
func (j *Job) WorldSize() int { return j.cfg.WorldSize }

// LocalRank is this process's rank on its machine (LOCAL_RANK); it picks the GPU.
func (j *Job) LocalRank() int { return j.cfg.LocalRank }

// Store is the job's connection to its rendezvous store, for the engine's own keys
// (keep clear of the "ncclgo/" prefix): a *rendezvous.Client, or under torchrun's agent
// store a *rendezvous.TCPStoreClient. After the connection was lost, the next
// rendezvous dials again and Store returns the new connection.
func (j *Job) Store() rendezvous.Store {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.store
}

func (j *Job) dial(ctx context.Context) (rendezvous.Store, error) {
	if j.agent != "" {
		return dialAgentStore(ctx, j.cfg, j.agent, j.log)
	}
	opts := []rendezvous.ClientOption{rendezvous.WithToken(j.cfg.Token), rendezvous.WithLogger(j.log)}
	if !j.external {
		opts = append(opts, rendezvous.WithServedBy("rank 0")) // "rank 0 never served the store at ADDR"
	}
	c, err := rendezvous.Dial(ctx, j.cfg.Addr(), opts...)
	if err != nil {
		return nil, err // not a nil *Client in a non-nil Store
	}
	return c, nil
}

// client returns the store connection, dialing again if the last one was lost.
func (j *Job) client(ctx context.Context) (rendezvous.Store, error) {
	j.mu.Lock()
	s, broken, closed := j.store, j.broken, j.closed
	j.mu.Unlock()
	switch {
	case closed:
		return nil, fmt.Errorf("job %w", comm.ErrClosed)
	case !broken:
		return s, nil
	}
	j.log.Info("comm: reconnecting to the rendezvous store", "addr", j.cfg.Addr(), "rank", j.cfg.Rank)
	ns, err := j.dial(ctx)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	if j.closed || j.store != s {
		j.mu.Unlock()
		_ = ns.Close()
		return j.client(ctx)
	}
	j.store, j.broken = ns, false
	j.mu.Unlock()
	_ = s.Close()
	return ns, nil
}

// lost marks s broken when err says its connection was lost.
func (j *Job) lost(s rendezvous.Store, err error) {
	if err == nil || !errors.Is(err, rendezvous.ErrClosed) {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.store == s && !j.closed {
		j.broken = true
	}
}

// NewNCCL creates this rank's NCCL backend in the next generation of its group: it
// opens the GPU of the local rank (or WithDevice's), meets the other ranks in the store
// (rank 0 creates the NCCL unique id and publishes it under the generation's key; all
// ranks pass the generation's barrier, which names the ranks that did not come when ctx
// ends; the others then read the id), and initialises a non-blocking communicator,
// polled until ready within ctx and the operation timeout. opts apply after JoinJob's.
//
// The backend's AttemptReconnect repeats this rendezvous in the group's next
// generation, so every rank must call it, and a restarted process that calls Connect
// joins the same generation. A missing peer is an error, never a hang: a
// [*rendezvous.BarrierError] (errors.As) lists the ranks that did not come.
func (j *Job) NewNCCL(ctx context.Context, opts ...nccl.Option) (*nccl.Backend, error) {
	cfg := ncclcfg.New(append(slices.Clone(j.opts), opts...))
	rank, world := j.cfg.Rank, j.cfg.WorldSize
	if err := core.CheckWorld(core.OpInit, rank, world, cfg.Elem, "nccl.WithElementType"); err != nil {
		return nil, err
	}
	if j.isClosed() {
		return nil, &comm.ArgError{Op: core.OpInit, Arg: "job", Value: j.cfg.Addr(), Err: comm.ErrClosed}
	}
	dev := ncclcfg.JobDevice(cfg, j.cfg.LocalRank)
	d, err := ncclcfg.DriverFor(cfg, dev, rank)
	if err != nil {
		return nil, &comm.OpError{Op: core.OpInit, Bytes: -1, Rank: rank, GlobalRank: rank, Err: fmt.Errorf("open device %d: %w", dev, err)}
	}
	group := cfg.Name
	if group == "" {
		group = defaultGroup
	}
	m := &member{job: j, group: group, rank: rank, world: world, newID: d.GetUniqueID, ids: j.ids}
	start := time.Now()
	ids, err := m.meet(ctx)
	m.ids = 0 // reconnects meet with rank 0's id alone
	if err != nil {
		return nil, &comm.OpError{Op: opRendezvous, Bytes: -1, Rank: rank, GlobalRank: rank, Err: err}
	}
	cfg.Reconnect = m.Reconnect
	cfg.Job.Member = m
	var b *nccl.Backend
	if j.ids > 0 {
		b, err = nccl.NewScalable(ctx, ids, rank, world, ncclcfg.Use(cfg, d))
	} else {
		b, err = nccl.New(ctx, ids[0], rank, world, ncclcfg.Use(cfg, d))
	}
	if err != nil {
		return nil, err
	}
	j.log.Info("comm: communicator ready", "rank", rank, "world", world, "group", group,
		"generation", m.generation(), "elapsed", time.Since(start))
	if s := j.Store(); s != nil && b.FlightRecorder() != nil {
		b.DumpOnStoreKey(s, DumpKey, 0) // an operator's dump on every rank
	}
	return b, nil
}

// DumpKey is the store key an operator sets to have every rank of a job whose flight
// recorder is on write its dump: "ncclgo/flightrec/dump/1" for the first dump,
// ".../2" for the next, and so on (any value; each rank checks every
// flightrec.DefaultKeyInterval until its backend closes). From Python:
// TCPStore(addr, port).set("ncclgo/flightrec/dump/1", "").
const DumpKey = "ncclgo/flightrec/dump"

// Connect brings up this process's rank of an NCCL job in one call: JoinJob (the
// environment as torchrun sets it, or WithJob), then Job.NewNCCL. The backend owns the
// Job: closing it closes the Job, and on rank 0 the store it serves. Under torchrun,
// when its agent serves the store (TORCHELASTIC_USE_AGENT_STORE=True), every rank uses
// the agent's store instead (see EnvUseAgentStore); NCCLGO_STORE_PORT asks for ncclgo's own
// store on that port all the same. A job started by hand, two processes on one machine
// with a GPU each:
//
//	MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 ./engine &
//	MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 ./engine
func Connect(ctx context.Context, opts ...Option) (*nccl.Backend, error) {
	j, err := JoinJob(ctx, opts...)
	if err != nil {
		return nil, err
	}
	b, err := j.NewNCCL(ctx, func(c *ncclcfg.Config) { c.Job.Owns = true })
	if err != nil {
		if cerr := j.Close(); cerr != nil {
			j.log.Warn("comm: close job after failed bring-up", "err", cerr)
		}
		return nil, err
	}
	return b, nil
}

func (j *Job) isClosed() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.closed
}

// retain takes a reference for a backend that owns the job.
func (j *Job) retain() {
	j.mu.Lock()
	j.refs++
	j.mu.Unlock()
}

// Close drops the caller's hold on the Job; once no backend made by Connect holds it
// either, it disconnects from the store and, on rank 0, stops the store it serves
// (after writing the replies already due). Backends made by NewNCCL keep working, but
// their AttemptReconnect fails from then on. A second Close returns ErrClosed.
func (j *Job) Close() error {
	j.mu.Lock()
	if j.refs == 0 {
		j.mu.Unlock()
		return &comm.ArgError{Op: core.OpClose, Arg: "job", Value: j.cfg.Addr(), Err: comm.ErrClosed, Reason: "already closed"}
	}
	j.refs--
	last := j.refs == 0
	j.mu.Unlock()
	if !last {
		return nil
	}
	return j.shutdown()
}

// shutdown closes the store client and the embedded server.
func (j *Job) shutdown() error {
	j.mu.Lock()
	j.closed, j.refs = true, 0
	j.mu.Unlock()
	j.mu.Lock()
	s := j.store
	j.mu.Unlock()
	var err error
	if s != nil {
		err = s.Close()
	}
	if j.server != nil {
		_ = j.server.Close()
		<-j.served
	}
	return err
}
