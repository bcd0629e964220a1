package sim

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// Device address layout: device d owns [addrBase + d*addrSpan, addrBase + (d+1)*addrSpan).
// Addresses are handed out by a bump pointer and never reused, with a guard gap after
// every allocation, so a pointer past the end, into a freed block or of another device
// is always caught.
const (
	addrBase   = 0x7f00_0000_0000
	addrSpan   = 1 << 36
	guard      = 4096
	allocAlign = 512     // cuMemAlloc
	ncclAlign  = 2 << 20 // ncclMemAlloc (cuMem granularity)
)

type allocation struct {
	base uint64
	data []byte
	nccl bool // from ncclMemAlloc
}

func (a *allocation) end() uint64 { return a.base + uint64(len(a.data)) }

type span struct{ base, end uint64 }

// device is one simulated GPU.
type device struct {
	idx   int
	limit uint64

	mu    sync.Mutex // guards the memory fields
	live  []*allocation
	freed []span
	next  uint64
	used  uint64

	// streams counts the stream goroutines of the device's current life; Add only under
	// World.mu while !halted, so that Wait after halt joins them all. Revive gives the
	// new life a new WaitGroup: a Kill still waiting for the old life's goroutines must
	// not share one with the revived device's first stream (sync.WaitGroup forbids an Add
	// from zero before every Wait of the previous round has returned). Guarded by World.mu.
	streams *sync.WaitGroup

	// The fields below are guarded by World.mu.
	def    *stream       // the legacy default stream (handle 0)
	stop   chan struct{} // closed when the device dies or the world closes; replaced by Revive
	halted bool
	dead   bool          // killed by fault injection
	sticky error         // a fault in device code: every later CUDA call fails with it
	hang   int           // injected: this many more NCCL operations never complete
	delay  time.Duration // injected: every NCCL operation waits this long first
}

func newDevice(idx int, limit uint64) *device {
	base := uint64(addrBase) + uint64(idx)*addrSpan
	return &device{idx: idx, limit: limit, next: base, stop: make(chan struct{}), streams: new(sync.WaitGroup)}
}

// halt closes stop once. Caller holds World.mu.
func (d *device) halt() {
	if !d.halted {
		d.halted = true
		close(d.stop)
	}
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) / a * a }

// alloc reserves bytes (> 0) of zeroed memory.
func (d *device) alloc(bytes uint64, nccl bool) (gpulib.Ptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.limit > 0 && d.used+bytes > d.limit {
		return 0, fmt.Errorf("%d bytes requested, %d of %d in use", bytes, d.used, d.limit)
	}
	align := uint64(allocAlign)
	if nccl {
		align = ncclAlign
	}
	base := alignUp(d.next, align)
	limit := uint64(addrBase) + uint64(d.idx+1)*addrSpan
	if bytes > limit-base || base+bytes > limit-guard {
		return 0, fmt.Errorf("%d bytes requested: address space of device %d exhausted", bytes, d.idx)
	}
	a := &allocation{base: base, data: make([]byte, bytes), nccl: nccl}
	d.live = append(d.live, a) // bases only grow: live stays sorted
	d.next = base + bytes + guard
	d.used += bytes
	return gpulib.Ptr(base), nil
}

// free releases the allocation that starts at p; nccl says which allocator the caller is.
func (d *device) free(p gpulib.Ptr, nccl bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	i, ok := d.find(uint64(p))
	if !ok {
		return d.missLocked(uint64(p))
	}
	a := d.live[i]
	switch {
	case a.base != uint64(p):
		return fmt.Errorf("pointer %#x is %d bytes into the allocation at %#x, not its start", uint64(p), uint64(p)-a.base, a.base)
	case a.nccl != nccl && a.nccl:
		return fmt.Errorf("pointer %#x comes from ncclMemAlloc", uint64(p))
	case a.nccl != nccl:
		return fmt.Errorf("pointer %#x comes from cuMemAlloc, not ncclMemAlloc", uint64(p))
	}
	d.live = slices.Delete(d.live, i, i+1)
	d.freed = append(d.freed, span{a.base, a.end()})
	d.used -= uint64(len(a.data))
	return nil
}

// find returns the index of the live allocation holding address p. Caller holds d.mu.
func (d *device) find(p uint64) (int, bool) {
	i := sort.Search(len(d.live), func(i int) bool { return d.live[i].end() > p })
	if i < len(d.live) && d.live[i].base <= p {
		return i, true
	}
	return 0, false
}

// missLocked explains why p is in no live allocation. Caller holds d.mu.
func (d *device) missLocked(p uint64) error {
	if p == 0 {
		return fmt.Errorf("null pointer")
	}
	for _, s := range d.freed {
		if s.base <= p && p < s.end {
			return fmt.Errorf("pointer %#x is in freed memory [%#x, %#x)", p, s.base, s.end)
		}
	}
	lo := uint64(addrBase) + uint64(d.idx)*addrSpan
	if p < lo || p >= lo+addrSpan {
		return fmt.Errorf("pointer %#x is not an address of device %d", p, d.idx)
	}
	return fmt.Errorf("pointer %#x is in no allocation of device %d", p, d.idx)
}

// slice returns the memory [p, p+n) inside one allocation. Caller holds d.mu.
func (d *device) sliceLocked(p gpulib.Ptr, n uint64) ([]byte, *allocation, error) {
	i, ok := d.find(uint64(p))
	if !ok {
		return nil, nil, d.missLocked(uint64(p))
	}
	a := d.live[i]
	off := uint64(p) - a.base
	if n > uint64(len(a.data))-off {
		return nil, nil, fmt.Errorf("range [%#x, +%d) runs %d bytes past the end of the %d-byte allocation at %#x",
			uint64(p), n, n-(uint64(len(a.data))-off), len(a.data), a.base)
	}
	return a.data[off : off+n : off+n], a, nil
}

// check reports whether [p, p+n) lies inside one live allocation; n == 0 always passes.
func (d *device) check(p gpulib.Ptr, n uint64) error {
	if n == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, _, err := d.sliceLocked(p, n)
	return err
}

// allocationOf returns the allocation holding [p, p+n).
func (d *device) allocationOf(p gpulib.Ptr, n uint64) (base uint64, size uint64, nccl bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, a, err := d.sliceLocked(p, max(n, 1))
	if err != nil {
		return 0, 0, false, err
	}
	return a.base, uint64(len(a.data)), a.nccl, nil
}

// read copies n bytes at p.
func (d *device) read(p gpulib.Ptr, n uint64) ([]byte, error) {
	if n == 0 {
		return []byte{}, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	b, _, err := d.sliceLocked(p, n)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}

// write copies data to p.
func (d *device) write(p gpulib.Ptr, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	b, _, err := d.sliceLocked(p, uint64(len(data)))
	if err != nil {
		return err
	}
	copy(b, data)
	return nil
}

// copyWithin copies n bytes from src to dst on this device (overlap allowed).
func (d *device) copyWithin(dst, src gpulib.Ptr, n uint64) error {
	if n == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s, _, err := d.sliceLocked(src, n)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	t, _, err := d.sliceLocked(dst, n)
	if err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	copy(t, s)
	return nil
}

// wipe frees every allocation (a restarted process); the addresses stay invalid.
func (d *device) wipe() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range d.live {
		d.freed = append(d.freed, span{a.base, a.end()})
	}
	d.live, d.used = nil, 0
}

// usage returns the bytes in use and the number of live allocations (plain, nccl).
func (d *device) usage() (bytes uint64, plain, nccl int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range d.live {
		if a.nccl {
			nccl++
		} else {
			plain++
		}
	}
	return d.used, plain, nccl
}
