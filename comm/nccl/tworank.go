package nccl

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
	"github.com/ncclgo/ncclgo/kernels"
)

// The two-rank all-reduce path of the NCCL backend.
//
// With two ranks, an add kernel set (SetAddKernel) and 0 < bytes <= the threshold,
// AllReduce and AllReduceAsync do not call ncclAllReduce. Instead, on the communication
// stream, each rank sends its buffer to the peer and receives the peer's buffer into a
// scratch buffer of its own, both in one NCCL group, then launches the add kernel
// (buffer += scratch). Each element of the result is a+b rounded once, the value
// ncclAllReduce gives for two ranks; floating-point addition of two values is
// commutative, so both ranks hold the same bits.
//
// Why it is faster for small messages: NCCL's ring all-reduce on two ranks is a
// reduce-scatter followed by an all-gather, two dependent network steps of S/2 bytes per
// rank each; the exchange is one step of S bytes per rank. Both put S bytes per rank on
// the wire, so the exchange saves one step's latency and pays instead for a kernel
// launch and an add pass that reads 2S and writes S bytes of device memory after the
// transfer (the ring fuses its additions into the transfer). Over RoCE a network step
// costs microseconds, far more than a launch queued behind the transfer and the add
// pass of a small buffer, so small messages win; the add pass grows with S while the
// saved step does not, and large messages also lose the ring's chunk pipelining, so
// above some size ncclAllReduce wins. DefaultTwoRankThreshold is where the add pass
// (3 MiB of device memory traffic for 1 MiB) still costs about a microsecond at the
// TB/s bandwidth of current HBM, well under one network step; it also bounds the
// scratch memory. The crossover depends on the fabric: measure it with commbench and
// set WithTwoRankThreshold.

// DefaultTwoRankThreshold is the largest all-reduce, in bytes, that a two-rank NCCL
// backend with an add kernel sends through the send/recv + add path (see
// WithTwoRankThreshold).
const DefaultTwoRankThreshold = ncclcfg.DefaultTwoRankThreshold

// minScratch is the smallest scratch allocation, so that the first small messages do
// not each grow it.
const minScratch = 4096

// WithTwoRankThreshold sets the largest all-reduce, in bytes, that a two-rank NCCL
// backend sends through the send/recv + add path once SetAddKernel has given it the
// add kernel (default DefaultTwoRankThreshold; larger ones call ncclAllReduce). 0
// disables the path; a negative value makes New fail with ErrInvalidSize. Every
// rank must use the same threshold and set the kernel at the same point of its call
// sequence: the two paths issue different NCCL operations, and ranks that disagree
// wait for each other until the operation timeout.
func WithTwoRankThreshold(bytes int) Option { return func(c *ncclcfg.Config) { c.TwoRankMax = bytes } }

// checkTwoRankThreshold validates WithTwoRankThreshold.
func checkTwoRankThreshold(rank, bytes int) error {
	if bytes < 0 {
		return &comm.ArgError{Op: core.OpInit, Arg: "two-rank threshold", Value: bytes, Err: comm.ErrInvalidSize,
			Reason: fmt.Sprintf("negative (rank %d); 0 disables the two-rank path", rank)}
	}
	return nil
}

// twoRank is the backend's state for the path: the device's SM count and the scratch
// buffer the peer's data lands in.
type twoRank struct {
	mu  sync.Mutex // serialises SetAddKernel
	sms int        // set by SetAddKernel before it stores the kernel; read after loading it

	// Guarded by the communicator's mu (operations) or its life held exclusively (Close).
	cur     scratch
	retired []scratch // replaced while the communication stream could still use them
}

// scratch is a device buffer registered (ncclCommRegister) with the communicator of
// generation gen; reg is 0 when it is not registered (NCCL < 2.19) and gen is -1 until
// it is.
type scratch struct {
	p     gpulib.Ptr
	bytes int
	reg   gpulib.Handle
	gen   int
}

// hasAddKernel reports whether package kernels has an add kernel for t.
func hasAddKernel(t comm.DType) bool {
	return t == comm.BFloat16 || t == comm.Float16 || t == comm.Float32
}

// useAddKernel stores k for the path; for element types without an add kernel it
// stores nothing. The first call reads the device's SM count for the launch
// configuration.
func (b *Backend) useAddKernel(k comm.Kernel) error {
	if !hasAddKernel(b.elem) {
		b.c.cfg.Log.Debug("comm: no add kernel for the element type; all-reduce keeps ncclAllReduce",
			"rank", b.c.rank, "type", b.elem)
		return nil
	}
	b.two.mu.Lock()
	defer b.two.mu.Unlock()
	if b.two.sms == 0 {
		n, err := b.c.d.MultiprocessorCount()
		if err == nil && n < 1 {
			err = fmt.Errorf("device reports %d multiprocessors", n)
		}
		if err != nil {
			return &comm.OpError{Op: core.OpSetAddKernel, Bytes: -1, Rank: b.c.rank, GlobalRank: b.c.global, Name: b.c.cfg.Name, Err: err}
		}
		b.two.sms = n
	}
	b.addKernel.Store(uintptr(k))
	return nil
}

// twoRankKernel returns the add kernel when an all-reduce of bytes at ptr takes the
// two-rank path, and 0 when it calls ncclAllReduce: inside a group the path is never
// taken (the kernel would be queued before the group launches the exchange). The guard
// has already rejected pointers not aligned to the element size (ErrMisaligned), so the
// add kernel's element loads are aligned on every rank that gets here.
func (b *Backend) twoRankKernel(bytes int, grouped bool) gpulib.Function {
	f := gpulib.Function(b.addKernel.Load())
	if f == 0 { // the usual case: no kernel set, one load
		return 0
	}
	if c := b.c; grouped || bytes <= 0 || bytes > c.cfg.TwoRankMax || c.world != 2 {
		return 0
	}
	return f
}

// exchangeAdd enqueues the path on the communication stream: in one NCCL group, send
// bytes at p to the peer and receive the peer's bytes into the scratch buffer, then
// the add kernel p += scratch. The caller holds c.mu. The received data lands at the
// same offset modulo 16 as p, so the kernel always takes its 16-byte vector loop.
func (b *Backend) exchangeAdd(f gpulib.Function, p gpulib.Ptr, bytes int) error {
	c := b.c
	off := uint64(p) & 15
	if err := b.ensureScratch(bytes + int(off)); err != nil {
		return err
	}
	recv := b.two.cur.p + gpulib.Ptr(off)
	count := uint64(bytes / b.size)
	dt := gpulib.DataType(b.elem)
	c.fr.Record(frCall(flightrec.AllReduce, count, dt, 0, 0)) // the caller's all-reduce, as NCCL's would be
	peer := 1 - c.rank

	runtime.LockOSThread() // NCCL keeps group state per OS thread
	err := c.d.GroupStart()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("two-rank exchange: group start: %w", err)
	}
	serr := pending(c.d.Send(p, count, dt, peer, c.comm, c.stream))
	var rerr error
	if serr == nil {
		rerr = pending(c.d.Recv(recv, count, dt, peer, c.comm, c.stream))
	}
	eerr := c.d.GroupEnd()
	runtime.UnlockOSThread()
	switch {
	case serr != nil:
		return fmt.Errorf("two-rank exchange: send to rank %d: %w", peer, serr)
	case rerr != nil:
		return fmt.Errorf("two-rank exchange: receive from rank %d: %w", peer, rerr)
	}
	if eerr != nil && code(eerr) == gpulib.InProgress {
		// The exchange is on the stream only once the communicator is back to success.
		eerr = c.settleHeld(bg, c.comm, bounded)
	}
	if eerr != nil {
		return fmt.Errorf("two-rank exchange: group end: %w", eerr)
	}
	grid, block, err := kernels.LaunchDims(int(count), b.size, b.two.sms)
	if err == nil {
		err = c.d.LaunchKernel(f, grid, block, c.stream, gpulib.KernelArgs{N: 3, V: [4]uint64{uint64(p), uint64(recv), count}})
	}
	if err != nil {
		return fmt.Errorf("two-rank add kernel: %w", err)
	}
	return nil
}

// pending treats ncclInProgress inside a group as success: the group's end reports
// the outcome.
func pending(err error) error {
	if err != nil && code(err) == gpulib.InProgress {
		return nil
	}
	return err
}

// ensureScratch makes the scratch buffer at least need bytes and registered with the
// current communicator. The caller holds c.mu. A larger buffer is a power of two of at
// least minScratch bytes, capped at the threshold plus the 16 bytes of alignment slack;
// the one it replaces is freed at once when the communication stream is idle, or at
// the next growth or Close otherwise.
func (b *Backend) ensureScratch(need int) error {
	c, t := b.c, &b.two
	gen := b.gen()
	if need <= t.cur.bytes && t.cur.gen == gen {
		return nil
	}
	if err := bind(c.d); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	if need > t.cur.bytes {
		size := min(max(pow2(need), minScratch), max(c.cfg.TwoRankMax+16, need))
		p, err := c.d.MemAlloc(uint64(size))
		if err != nil {
			return fmt.Errorf("allocate %d bytes of two-rank scratch: %w", size, err)
		}
		if t.cur.p != 0 {
			t.retired = append(t.retired, t.cur)
		}
		t.cur = scratch{p: p, bytes: size, gen: -1}
		b.freeRetired(gen)
	}
	if c.version >= versionRegister {
		h, err := c.d.CommRegister(c.comm, t.cur.p, uint64(t.cur.bytes))
		if code(err) == gpulib.InProgress {
			err = c.settleHeld(bg, c.comm, bounded)
		}
		if err != nil {
			return fmt.Errorf("register %d bytes of two-rank scratch: %w", t.cur.bytes, err)
		}
		t.cur.reg = h
	}
	t.cur.gen = gen
	return nil
}

// freeRetired deregisters and frees the replaced scratch buffers once the
// communication stream has finished with them. The caller holds c.mu and the device.
func (b *Backend) freeRetired(gen int) {
	c, t := b.c, &b.two
	if len(t.retired) == 0 {
		return
	}
	if idle, err := c.d.StreamQuery(c.stream); err != nil || !idle {
		return
	}
	for _, s := range t.retired {
		b.freeScratch(s, gen, func(what string, err error) {
			if err != nil {
				c.cfg.Log.Warn("comm: two-rank scratch", "rank", c.rank, "step", what, "err", err)
			}
		})
	}
	clear(t.retired)
	t.retired = t.retired[:0]
}

// freeScratch deregisters s (when it is registered with the communicator of
// generation gen, which still exists) and frees it.
func (b *Backend) freeScratch(s scratch, gen int, note func(string, error)) {
	c := b.c
	if s.reg != 0 && s.gen == gen && c.comm != 0 {
		note("deregister two-rank scratch", c.d.CommDeregister(c.comm, s.reg))
	}
	note("free two-rank scratch", c.d.MemFree(s.p))
}

// releaseScratch frees every scratch buffer; Close calls it (through release, which
// holds regMu) before the communicator ends.
func (b *Backend) releaseScratch(note func(string, error)) {
	t := &b.two
	for _, s := range append(t.retired, t.cur) {
		if s.p != 0 {
			b.freeScratch(s, b.generation, note)
		}
	}
	t.cur, t.retired = scratch{}, nil
}

// gen is the communicator generation (AttemptReconnect increments it).
func (b *Backend) gen() int {
	b.regMu.Lock()
	defer b.regMu.Unlock()
	return b.generation
}

// pow2 returns the smallest power of two >= n for n > 0, or n when that power does
// not fit in an int.
func pow2(n int) int {
	if n <= 1 || n > math.MaxInt/2+1 {
		return max(n, 1)
	}
	return 1 << bits.Len(uint(n-1))
}
