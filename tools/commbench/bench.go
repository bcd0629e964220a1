package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/comm"
)

// rank is one rank this process drives: its communicator and its device memory.
type rank interface {
	// Comm is the rank's typed communicator.
	Comm() comm.Communicator
	// Alloc allocates bytes of device memory.
	Alloc(bytes int64) (comm.DevicePtr, error)
	// Free frees memory from Alloc.
	Free(p comm.DevicePtr) error
	// Write copies data from the host to p.
	Write(p comm.DevicePtr, data []byte) error
	// Read copies n bytes at p to the host.
	Read(p comm.DevicePtr, n int64) ([]byte, error)
}

// world is the set of ranks a run drives.
type world struct {
	ranks     []rank
	simulated bool
	// devices describes each rank's device, one line each, for the header.
	devices []string
	close   func() error

	// A world spread over processes (-mpi, one rank each under mpirun): size is the
	// world size and ids the world ranks of ranks; reduce combines values over the
	// processes in place with op (Sum, Min or Max); barrier returns once every process
	// has called it; quiet marks a process whose output is left to rank 0. The zero
	// values are one process driving every rank.
	size    int
	ids     []int
	reduce  func(v []float64, op comm.ReduceOp) error
	barrier func(ctx context.Context) error
	quiet   bool

	// now, when not nil, is the clock measurements read instead of time.Now (tests).
	now func() time.Time
}

// worldSize is the number of ranks of the world, over every process.
func (w *world) worldSize() int {
	if w.size > 0 {
		return w.size
	}
	return len(w.ranks)
}

// id is the world rank of the process's rank i.
func (w *world) id(i int) int {
	if w.ids != nil {
		return w.ids[i]
	}
	return i
}

// total adds v over the processes of the world (nothing to add in one process).
func (w *world) total(v ...float64) ([]float64, error) {
	if w.reduce == nil {
		return v, nil
	}
	return v, w.reduce(v, comm.Sum)
}

// reported combines times, the seconds per operation of the process's ranks, into the
// time the table reports, as nccl-tests' -a: rank 0's, the mean, the minimum or the
// maximum over every rank of the world. Over processes the other ranks' times come
// through reduce; with a rank 0's time each process keeps its own (rank 0 prints).
func (w *world) reported(times []float64, a average) (float64, error) {
	v := combine(times, a)
	if w.reduce == nil || a == avgRank0 {
		return v, nil
	}
	op := comm.Sum
	switch a {
	case avgMin:
		op = comm.Min
	case avgMax:
		op = comm.Max
	default:
		v *= float64(len(times)) // the process's sum, to add over the processes
	}
	all := []float64{v}
	if err := w.reduce(all, op); err != nil {
		return 0, err
	}
	if op == comm.Sum {
		return all[0] / float64(w.worldSize()), nil
	}
	return all[0], nil
}

// combine is nccl-tests' -a over times, one per rank in rank order: the first (rank
// 0's), the mean, the minimum or the maximum.
func combine(times []float64, a average) float64 {
	if len(times) == 0 {
		return 0
	}
	switch a {
	case avgRank0:
		return times[0]
	case avgMin:
		return slices.Min(times)
	case avgMax:
		return slices.Max(times)
	}
	var sum float64
	for _, t := range times {
		sum += t
	}
	return sum / float64(len(times))
}

// measure is one timed and checked column group: time, algbw, busbw, #wrong.
type measure struct {
	TimeUS float64 `json:"time_us"`
	AlgBW  float64 `json:"algbw_gbps"`
	BusBW  float64 `json:"busbw_gbps"`
	// Wrong is the number of elements that differ from the host reference, summed over
	// ranks; nil when results were not checked (-c 0).
	Wrong *int64 `json:"wrong"`
}

// row is one line of the table: one message size.
type row struct {
	Size  int64  `json:"size"`
	Count int64  `json:"count"`
	Type  string `json:"type"`
	RedOp string `json:"redop"`
	Root  int    `json:"root"`
	// OutOfPlace is nil for collectives that comm offers in place only.
	OutOfPlace *measure `json:"out_of_place"`
	// InPlace is nil for collectives that need separate buffers (alltoall).
	InPlace *measure `json:"in_place"`
}

// table is the result of one collective: nccl-tests' output of one *_perf binary.
type table struct {
	Collective string `json:"collective"`
	Rows       []row  `json:"results"`
	// OutOfBounds counts the measurements with wrong elements.
	OutOfBounds int `json:"out_of_bounds"`
	// AvgBusBW is the mean busbw over every measurement of the table, in GB/s.
	AvgBusBW float64 `json:"avg_bus_bandwidth"`

	busSum   float64
	busCount int
}

// add appends r and updates the footer figures.
func (t *table) add(r row) {
	t.Rows = append(t.Rows, r)
	for _, m := range []*measure{r.OutOfPlace, r.InPlace} {
		if m == nil {
			continue
		}
		t.busSum += m.BusBW
		t.busCount++
		if m.Wrong != nil && *m.Wrong > 0 {
			t.OutOfBounds++
		}
	}
	if t.busCount > 0 {
		t.AvgBusBW = t.busSum / float64(t.busCount)
	}
}

// test is one collective on one type, operator and root: a sequence of rows.
type test struct {
	coll collective
	t    comm.DType
	op   comm.ReduceOp
	root int // -1 when not rooted
}

func (s test) opName() string {
	if !s.coll.reduces {
		return "none"
	}
	return s.op.String()
}

// tests expands the configuration into the tests of one collective.
func (c config) tests(coll collective, n int) []test {
	ops := c.ops
	if !coll.reduces {
		ops = []comm.ReduceOp{comm.Sum} // data pattern only; printed as "none"
	}
	roots := []int{-1}
	if coll.rooted {
		roots = []int{c.root}
		if c.root == -1 {
			roots = roots[:0]
			for r := range n {
				roots = append(roots, r)
			}
		}
	}
	var out []test
	for _, t := range c.types {
		for _, op := range ops {
			for _, root := range roots {
				out = append(out, test{coll: coll, t: t, op: op, root: root})
			}
		}
	}
	return out
}

// buffers are one rank's send and receive buffers, each large enough for the largest
// message of a test in either form.
type buffers struct {
	send, recv comm.DevicePtr
	bytes      int64
}

// runner drives the ranks of a world through the tests.
type runner struct {
	cfg      config
	w        *world
	progress *progress
}

// now reads the clock the measurements are timed with: the world's if it has one.
func (r *runner) now() time.Time {
	if r.w.now != nil {
		return r.w.now()
	}
	return time.Now()
}

// n is the world size.
func (r *runner) n() int { return r.w.worldSize() }

// runTest measures every size of one test and hands each row to emit.
func (r *runner) runTest(ctx context.Context, s test, emit func(row)) error {
	if s.coll.rooted && s.root >= r.n() {
		return fmt.Errorf("%s: root %d is not a rank of a world of %d", s.coll.name, s.root, r.n())
	}
	elem := int64(s.t.Size())
	sizes := r.cfg.sizes()
	maxLay := s.coll.layout(r.cfg.maxBytes/elem, int64(r.n()))
	bufs, err := r.alloc(maxLay.bytes(elem))
	if err != nil {
		return err
	}
	defer r.free(bufs)

	// Warm up at the largest and the smallest size, like nccl-tests.
	for _, size := range []int64{r.cfg.maxBytes, r.cfg.minBytes} {
		lay := s.coll.layout(size/elem, int64(r.n()))
		if err := r.timed(ctx, s, lay, bufs, !s.coll.outOfPlace, r.newPass(r.cfg.warmup, 1, 0), nil); err != nil {
			return fmt.Errorf("%s warm-up at %d bytes: %w", s.coll.name, size, err)
		}
	}
	for i, size := range sizes {
		r.progress.update(s, size, i, len(sizes))
		lay := s.coll.layout(size/elem, int64(r.n()))
		out := row{Size: lay.bytes(elem), Count: lay.param, Type: typeName(s.t), RedOp: s.opName(), Root: s.root}
		if s.coll.outOfPlace {
			if out.OutOfPlace, err = r.measure(ctx, s, lay, bufs, false); err != nil {
				return err
			}
		}
		if !s.coll.noInPlace {
			if out.InPlace, err = r.measure(ctx, s, lay, bufs, true); err != nil {
				return err
			}
		}
		emit(out)
	}
	return nil
}

func (r *runner) alloc(bytes int64) ([]buffers, error) {
	bufs := make([]buffers, 0, r.n())
	for i, rk := range r.w.ranks {
		b := buffers{bytes: bytes}
		var err error
		if b.send, err = rk.Alloc(max(bytes, 1)); err == nil {
			if b.recv, err = rk.Alloc(max(bytes, 1)); err != nil {
				_ = rk.Free(b.send)
			}
		}
		if err != nil {
			r.free(bufs)
			return nil, fmt.Errorf("rank %d: allocating 2 x %d bytes: %w", i, bytes, err)
		}
		bufs = append(bufs, b)
	}
	return bufs, nil
}

func (r *runner) free(bufs []buffers) {
	for i, b := range bufs {
		_ = r.w.ranks[i].Free(b.send)
		_ = r.w.ranks[i].Free(b.recv)
	}
}

// measure times one form (in place or not) of one size and checks its result.
func (r *runner) measure(ctx context.Context, s test, lay layout, bufs []buffers, inPlace bool) (*measure, error) {
	form := "out-of-place"
	if inPlace {
		form = "in-place"
	}
	times := make([]time.Duration, len(r.w.ranks))
	p := r.newPass(r.cfg.iters, r.cfg.aggIters, r.cfg.graphs)
	if err := r.timed(ctx, s, lay, bufs, inPlace, p, times); err != nil {
		return nil, fmt.Errorf("%s %s of %d elements: %w", s.coll.name, form, lay.param, err)
	}
	perOp := make([]float64, len(times)) // nccl-tests: each rank's time per operation, then -a
	for i, d := range times {
		perOp[i] = d.Seconds() / float64(p.ops())
	}
	sec, err := r.w.reported(perOp, r.cfg.average)
	if err != nil {
		return nil, err
	}
	m := &measure{TimeUS: sec * 1e6}
	m.AlgBW, m.BusBW = s.coll.bandwidth(lay.param, int64(s.t.Size()), r.n(), sec)
	if r.cfg.check > 0 && !(inPlace && s.coll.uncheckedInPlace) {
		var bad int64
		for range r.cfg.check {
			w, err := r.check(ctx, s, lay, bufs, inPlace)
			if err != nil {
				return nil, fmt.Errorf("%s %s check of %d elements: %w", s.coll.name, form, lay.param, err)
			}
			if bad = w; bad > 0 {
				break
			}
		}
		m.Wrong = &bad
	}
	return m, nil
}

// parallel runs f for every rank at once, from one goroutine each, released together,
// and returns the first error; the others see ctx cancelled.
func (r *runner) parallel(ctx context.Context, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := make(chan struct{})
	errs := make([]error, len(r.w.ranks))
	var wg sync.WaitGroup
	for i := range r.w.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if errs[i] = f(ctx, i); errs[i] != nil {
				cancel()
			}
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("rank %d: %w", i, err)
		}
	}
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", i, err)
		}
	}
	return nil
}

// pass is how timed issues a test's operations, as nccl-tests' timing loop: iters
// iterations of agg operations each (one group when agg is more than 1), waiting as
// blocking says (-z), and with graphs above 0 all of them captured into a CUDA graph
// that is then launched graphs times.
type pass struct {
	iters, agg, graphs int
	blocking           int
}

// newPass is the pass of iters iterations of agg operations, captured and launched
// graphs times when graphs is above 0, blocking as -z says.
func (r *runner) newPass(iters, agg, graphs int) pass {
	return pass{iters: iters, agg: agg, graphs: graphs, blocking: r.cfg.blocking}
}

// ops is the number of operations a pass runs: what its time is divided by.
func (p pass) ops() int { return p.iters * p.agg * max(p.graphs, 1) }

// timed runs pass p of s on every rank and waits for it; times, when not nil, receives
// each rank's wall time from the first issue (with a graph: the first launch) to the
// completed Sync.
func (r *runner) timed(ctx context.Context, s test, lay layout, bufs []buffers, inPlace bool, p pass, times []time.Duration) error {
	if p.iters == 0 {
		return nil
	}
	bar := newBarrier(len(r.w.ranks), r.w.barrier)
	return r.parallel(ctx, func(ctx context.Context, i int) error {
		if p.graphs > 0 {
			return r.replayed(ctx, i, s, lay, bufs[i], inPlace, p, bar, times)
		}
		c := r.w.ranks[i].Comm()
		t0 := r.now()
		waited, err := r.iterate(ctx, c, i, s, lay, bufs[i], inPlace, p, bar)
		if err != nil {
			return err
		}
		if err := c.Sync(ctx); err != nil {
			return err
		}
		if times != nil {
			times[i] = r.now().Sub(t0)
			if p.blocking == 3 { // nccl-tests: the time of the iterations, not of the barriers
				times[i] = waited
			}
		}
		return nil
	})
}

// iterate issues the iterations of p on rank i's communicator c. With -z 1 and 2 it
// waits for every operation (1: then for every rank); with -z 3 for every iteration,
// then for every rank, and returns the time of the iterations up to their waits
// (without the barriers). Otherwise it does not wait for the last operation.
func (r *runner) iterate(ctx context.Context, c comm.Communicator, i int, s test, lay layout, b buffers, inPlace bool, p pass, bar *barrier) (time.Duration, error) {
	id := r.w.id(i)
	var waited time.Duration
	for range p.iters {
		t0 := r.now()
		if p.agg == 1 {
			if err := r.issue(c, id, s, lay, b, inPlace); err != nil {
				return 0, err
			}
		} else {
			if err := c.GroupStart(); err != nil {
				return 0, err
			}
			var err error
			for range p.agg {
				if err = r.issue(c, id, s, lay, b, inPlace); err != nil {
					break
				}
			}
			if err = errors.Join(err, c.GroupEnd()); err != nil {
				return 0, err
			}
		}
		if p.blocking == 0 {
			continue
		}
		// -z 1 and 2 wait for the operation (the iteration's only one), -z 3 for the
		// iteration: the same Sync.
		if err := c.Sync(ctx); err != nil {
			return 0, err
		}
		waited += r.now().Sub(t0)
		if p.blocking == 2 {
			continue
		}
		if err := bar.wait(ctx); err != nil {
			return 0, err
		}
	}
	return waited, nil
}

// replayed captures the iterations of p on rank i into a CUDA graph, waits for every
// rank to have captured, and times p.graphs launches of the graph.
func (r *runner) replayed(ctx context.Context, i int, s test, lay layout, b buffers, inPlace bool, p pass, bar *barrier, times []time.Duration) (err error) {
	cr, ok := r.w.ranks[i].(capturer)
	if !ok {
		return fmt.Errorf("-G: %T cannot capture a CUDA graph", r.w.ranks[i])
	}
	g, err := cr.Capture(func(c comm.Communicator) error {
		_, err := r.iterate(ctx, c, i, s, lay, b, inPlace, p, bar)
		return err
	})
	if err != nil {
		return fmt.Errorf("capturing a CUDA graph: %w", err)
	}
	defer func() {
		if derr := g.Destroy(); err == nil && derr != nil {
			err = fmt.Errorf("destroying the CUDA graph: %w", derr)
		}
	}()
	if err := bar.wait(ctx); err != nil { // nccl-tests: every rank has instantiated its graph
		return err
	}
	t0 := r.now()
	for k := range p.graphs {
		if err := g.Launch(); err != nil {
			return fmt.Errorf("launching the CUDA graph (launch %d of %d): %w", k+1, p.graphs, err)
		}
	}
	if err := g.Wait(ctx); err != nil {
		return err
	}
	if times != nil {
		times[i] = r.now().Sub(t0)
	}
	return nil
}

// capturer is a rank that can capture into CUDA graphs (the simulator's and a GPU's).
type capturer interface {
	// Capture runs record with a communicator whose operations go to a stream that is
	// capturing, and returns the instantiated graph.
	Capture(record func(c comm.Communicator) error) (graph, error)
}

// graph is a captured, instantiated CUDA graph of one rank.
type graph interface {
	// Launch enqueues one replay of the graph on the stream it was captured on.
	Launch() error
	// Wait waits until every launch has completed.
	Wait(ctx context.Context) error
	// Destroy releases the graph.
	Destroy() error
}

// barrier is nccl-tests' Barrier: it returns once every rank goroutine of this
// process, and (with world.barrier) every process, has reached it. It can be used
// again once it has returned.
type barrier struct {
	mu     sync.Mutex
	n      int
	seen   int
	cur    *round
	across func(ctx context.Context) error
}

// round is one use of a barrier: done closes when the last goroutine has arrived and
// the processes have met, with err set before.
type round struct {
	done chan struct{}
	err  error
}

// newBarrier is a barrier for n goroutines of this process and, when across is not
// nil, the other processes.
func newBarrier(n int, across func(ctx context.Context) error) *barrier {
	return &barrier{n: n, cur: &round{done: make(chan struct{})}, across: across}
}

// wait blocks until every goroutine has called it (and the processes have met), or
// ctx is done.
func (b *barrier) wait(ctx context.Context) error {
	b.mu.Lock()
	r := b.cur
	if b.seen++; b.seen < b.n {
		b.mu.Unlock()
		select {
		case <-r.done:
			return r.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.seen, b.cur = 0, &round{done: make(chan struct{})}
	b.mu.Unlock()
	if b.across != nil {
		r.err = b.across(ctx)
	}
	close(r.done)
	return r.err
}

// pointers returns the send and receive pointers of rank i for one form of s.
func pointers(s test, lay layout, b buffers, i int, inPlace bool) (send, recv comm.DevicePtr) {
	if !inPlace {
		return b.send, b.recv
	}
	elem := int64(s.t.Size())
	base := b.recv
	return base + comm.DevicePtr(int64(i)*lay.sendInPlace*elem), base + comm.DevicePtr(int64(i)*lay.recvInPlace*elem)
}

// issue enqueues one operation of s on world rank i's communicator c.
func (r *runner) issue(c comm.Communicator, i int, s test, lay layout, b buffers, inPlace bool) error {
	send, recv := pointers(s, lay, b, i, inPlace)
	count := int(lay.param)
	switch s.coll.name {
	case "all_reduce":
		if !inPlace {
			return c.AllReduceInto(send, recv, count, s.t, s.op)
		}
		return c.AllReduce(recv, count, s.t, s.op)
	case "reduce":
		return c.Reduce(send, recv, count, s.t, s.op, s.root)
	case "alltoall":
		return c.AllToAll(send, recv, count, s.t)
	case "gather":
		return c.Gather(send, recv, count, s.t, s.root)
	case "scatter":
		return c.Scatter(send, recv, count, s.t, s.root)
	case "all_gather":
		return c.AllGather(send, recv, count, s.t)
	case "reduce_scatter":
		return c.ReduceScatter(send, recv, count, s.t, s.op)
	case "broadcast":
		if !inPlace {
			return c.BroadcastInto(send, recv, count, s.t, s.root)
		}
		return c.Broadcast(recv, count, s.t, s.root)
	case "sendrecv":
		// The pair must progress together: one group.
		n := r.n()
		if err := c.GroupStart(); err != nil {
			return err
		}
		errSend := c.Send(send, count, s.t, (i+1)%n, 0)
		errRecv := c.Recv(recv, count, s.t, (i-1+n)%n, 0)
		return errors.Join(errSend, errRecv, c.GroupEnd())
	}
	return fmt.Errorf("unknown collective %q", s.coll.name)
}

// check fills every rank's buffers from the reference inputs, runs s once (with -G as
// a captured graph launched once, as nccl-tests checks), and counts the elements that
// differ from the host reference, summed over ranks.
func (r *runner) check(ctx context.Context, s test, lay layout, bufs []buffers, inPlace bool) (int64, error) {
	n := r.n()
	elem := int64(s.t.Size())
	if err := r.parallel(ctx, func(_ context.Context, i int) error {
		return r.fill(s, lay, bufs[i], i, inPlace)
	}); err != nil {
		return 0, err
	}
	if err := r.timed(ctx, s, lay, bufs, inPlace, r.newPass(1, 1, min(r.cfg.graphs, 1)), nil); err != nil {
		return 0, err
	}
	wrongs := make([]int64, len(r.w.ranks))
	err := r.parallel(ctx, func(_ context.Context, i int) error {
		id := r.w.id(i)
		if s.coll.rootOnly && id != s.root {
			return nil // nccl-tests checks the root's result only
		}
		_, recv := pointers(s, lay, bufs[i], id, inPlace)
		got, err := r.w.ranks[i].Read(recv, lay.recv*elem)
		if err != nil {
			return err
		}
		wrongs[i] = wrong(s.t, s.op, n, got, expected(s, lay, n, id))
		return nil
	})
	if err != nil {
		return 0, err
	}
	var total int64
	for _, w := range wrongs {
		total += w
	}
	all, err := r.w.total(float64(total))
	return int64(all[0]), err
}

// fill writes the inputs of the process's rank k, and poison where its outputs go, for
// one form of s.
func (r *runner) fill(s test, lay layout, b buffers, k int, inPlace bool) error {
	n := r.n()
	elem := int64(s.t.Size())
	rk := r.w.ranks[k]
	i := r.w.id(k)
	in := func(count, offset int64) []byte {
		buf := make([]byte, count*elem)
		for j := range count {
			encode(s.t, buf, j, input(s.t, s.op, n, i, offset+j))
		}
		return buf
	}
	poisoned := func(count int64) []byte {
		buf := make([]byte, count*elem)
		poison(buf)
		return buf
	}
	send, recv := pointers(s, lay, b, i, inPlace)
	switch s.coll.name {
	case "all_reduce", "reduce":
		if inPlace {
			return rk.Write(recv, in(lay.param, 0))
		}
		if err := rk.Write(recv, poisoned(lay.recv)); err != nil {
			return err
		}
		return rk.Write(send, in(lay.send, 0))
	case "broadcast":
		if !inPlace {
			if err := rk.Write(recv, poisoned(lay.param)); err != nil {
				return err
			}
			return rk.Write(send, in(lay.param, 0))
		}
		if i == s.root {
			return rk.Write(recv, in(lay.param, 0))
		}
		return rk.Write(recv, poisoned(lay.param))
	case "all_gather", "gather":
		if err := rk.Write(recv, poisoned(lay.recv)); err != nil {
			return err
		}
		return rk.Write(send, in(lay.send, 0))
	case "reduce_scatter", "alltoall", "scatter":
		if !inPlace {
			if err := rk.Write(recv, poisoned(lay.recv)); err != nil {
				return err
			}
		}
		return rk.Write(send, in(lay.send, 0))
	case "sendrecv":
		if !inPlace {
			if err := rk.Write(recv, poisoned(lay.recv)); err != nil {
				return err
			}
		}
		return rk.Write(send, in(lay.send, 0))
	}
	return fmt.Errorf("unknown collective %q", s.coll.name)
}

// expected is the reference of rank i's output, element by element.
func expected(s test, lay layout, n, i int) func(j int64) float64 {
	switch s.coll.name {
	case "all_reduce", "reduce":
		return func(j int64) float64 { return reduce(s.t, s.op, n, j) }
	case "broadcast":
		return func(j int64) float64 { return input(s.t, s.op, n, s.root, j) }
	case "alltoall": // block q comes from rank q's block i
		per := max(lay.param, 1)
		return func(j int64) float64 { return input(s.t, s.op, n, int(j/per), int64(i)*per+j%per) }
	case "scatter":
		return func(j int64) float64 { return input(s.t, s.op, n, s.root, int64(i)*lay.recv+j) }
	case "gather", "all_gather":
		return func(j int64) float64 { return input(s.t, s.op, n, int(j/max(lay.send, 1)), j%max(lay.send, 1)) }
	case "reduce_scatter":
		return func(j int64) float64 { return reduce(s.t, s.op, n, int64(i)*lay.recv+j) }
	case "sendrecv":
		return func(j int64) float64 { return input(s.t, s.op, n, (i-1+n)%n, j) }
	}
	return func(int64) float64 { return 0 }
}
