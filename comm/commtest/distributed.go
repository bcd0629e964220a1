package commtest

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
)

// Memory is the buffer side of an Instance: allocation and synchronous copies between
// the host and a rank's memory (device memory on a Cluster, host memory for MPI).
type Memory interface {
	Alloc(rank, bytes int) (comm.DevicePtr, error)
	Free(rank int, p comm.DevicePtr) error
	Write(rank int, p comm.DevicePtr, data []byte) error
	Read(rank int, p comm.DevicePtr, n int) ([]byte, error)
}

// CommInstance is one running world of a CommHarness: the typed Communicators of the
// ranks this process runs and the memory they work on. It may also be a CallCounter.
type CommInstance interface {
	Memory
	// Communicators returns one entry per rank of the world, index = rank: the
	// process's own ranks' communicators, nil for ranks that other processes run.
	Communicators() []comm.Communicator
	// Close closes the communicators and releases the memory.
	Close() error
}

// CommHarness describes a Communicator implementation for RunCommunicatorConformance,
// whose ranks may live in several processes: under mpirun each process runs the suite
// for its own rank (Local), and every rank checks its own results, which depend only on
// the world size.
type CommHarness struct {
	// Name labels the run.
	Name string
	// World is the number of ranks.
	World int
	// Local lists the ranks this process runs; nil means all of them (one process).
	Local []int
	// Start starts the ranks. The suite closes the instance.
	Start func() (CommInstance, error)
	// Timeout bounds every step that waits for all ranks (default one minute).
	Timeout time.Duration
	// Lacks states the optional capabilities the implementation does not have (the MPI
	// Communicator: CapPreMulSum, CapGroupScope). Their cases must answer
	// ErrUnsupported (or lack the method) on every rank and are then skipped, saying
	// so, or check the documented alternative (CapGroupScope: groups defer nothing); a
	// missing capability not listed here fails, and so does a listed one that works.
	Lacks []Capability
}

// RunCommunicatorConformance runs the typed part of RunConformance against a
// Communicator that has no Backend (the MPI Communicator on host memory): every element
// type with every reduce op (all-reduce, reduce-scatter, all-reduce-into, reduce to
// roots in turn), all-gather, broadcast, broadcast-into, gather and scatter from every
// root, all-to-all, all-to-allv, pre-mul-sum operators (CapPreMulSum, unless Lacks
// lists it), a send/receive ring with tags (in a group where the communicator has
// groups), barrier, split by color and key (CapSplit); then the typed bad-input table (comm's sentinel errors, no
// library call where the instance counts them) and every call after Close. Every rank of
// the world must run it, in the same order.
func RunCommunicatorConformance(t *testing.T, h CommHarness) {
	t.Helper()
	if h.World < 1 || h.Start == nil {
		t.Fatalf("conformance %q: harness needs World >= 1 and Start (world %d)", h.Name, h.World)
	}
	for _, r := range h.Local {
		if r < 0 || r >= h.World {
			t.Fatalf("conformance %q: local rank %d outside world %d", h.Name, r, h.World)
		}
	}
	if len(h.Local) == 0 {
		h.Local = nil
	}
	if h.Timeout <= 0 {
		h.Timeout = time.Minute
	}
	lacks := func(c Capability) bool { return slices.Contains(h.Lacks, c) }
	start := func(t *testing.T) (*env, []comm.Communicator) {
		inst, err := h.Start()
		if err != nil {
			t.Fatalf("start %s: %v", h.Name, err)
		}
		closed := false
		t.Cleanup(func() {
			if !closed {
				if err := inst.Close(); err != nil && !errors.Is(err, comm.ErrClosed) {
					t.Errorf("close %s: %v", h.Name, err)
				}
			}
		})
		cs := inst.Communicators()
		e := &env{h: Harness{Name: h.Name, World: h.World, Timeout: h.Timeout}, n: h.World,
			elem: comm.BFloat16, es: 2, mem: inst, local: h.Local, count: inst, lacks: lacks}
		if len(cs) != h.World {
			t.Fatalf("%s: %d communicators for a world of %d", h.Name, len(cs), h.World)
		}
		for _, r := range e.ranks() {
			if cs[r] == nil || cs[r].Rank() != r || cs[r].WorldSize() != h.World {
				t.Fatalf("%s: communicator of rank %d is %v", h.Name, r, cs[r])
			}
		}
		return e, cs
	}
	t.Run("typed", func(t *testing.T) {
		e, cs := start(t)
		e.typed(t, cs)
	})
	t.Run("bad-input", func(t *testing.T) {
		e, cs := start(t)
		me := e.ranks()[0]
		p := e.buffers(t, 4096, nil)[me]
		t.Run("typed-arguments", func(t *testing.T) { e.badTyped(t, cs[me], p) })
		t.Run("after-close", func(t *testing.T) {
			mine := make([]comm.Communicator, 0, len(e.ranks()))
			for _, r := range e.ranks() {
				mine = append(mine, cs[r])
			}
			e.closedTyped(t, mine, p)
		})
	})
}

// HostMemory is the Memory of host buffers for communicators whose pointers are host
// addresses (the MPI Communicator): Go memory pinned with runtime.Pinner, aligned to 64
// bytes, one pool for all ranks of the process. It is safe for concurrent use.
type HostMemory struct {
	mu   sync.Mutex
	bufs map[comm.DevicePtr]*hostBuf
}

type hostBuf struct {
	b   []byte
	pin runtime.Pinner
}

// NewHostMemory returns an empty HostMemory.
func NewHostMemory() *HostMemory { return &HostMemory{bufs: map[comm.DevicePtr]*hostBuf{}} }

// Alloc returns the address of bytes pinned, zeroed host bytes (rank is not used).
func (m *HostMemory) Alloc(_ int, bytes int) (comm.DevicePtr, error) {
	if bytes < 0 {
		return 0, fmt.Errorf("host alloc of %d bytes: negative size", bytes)
	}
	hb := &hostBuf{b: make([]byte, bytes+64)}
	hb.pin.Pin(&hb.b[0])
	off := (64 - uintptr(unsafe.Pointer(&hb.b[0]))%64) % 64
	hb.b = hb.b[off : off+uintptr(bytes) : off+uintptr(bytes)]
	p := comm.DevicePtr(uintptr(unsafe.Pointer(unsafe.SliceData(hb.b))))
	m.mu.Lock()
	m.bufs[p] = hb
	m.mu.Unlock()
	return p, nil
}

// Free unpins and forgets a buffer Alloc returned.
func (m *HostMemory) Free(_ int, p comm.DevicePtr) error {
	m.mu.Lock()
	hb := m.bufs[p]
	delete(m.bufs, p)
	m.mu.Unlock()
	if hb == nil {
		return fmt.Errorf("host free of %#x: not allocated here", uint64(p))
	}
	hb.pin.Unpin()
	return nil
}

func (m *HostMemory) slice(p comm.DevicePtr, n int) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for base, hb := range m.bufs {
		if p >= base && int(p-base)+n <= len(hb.b) {
			return hb.b[p-base : int(p-base)+n], nil
		}
	}
	return nil, fmt.Errorf("host range %#x+%d: not inside one allocated buffer", uint64(p), n)
}

// Write copies data to p.
func (m *HostMemory) Write(_ int, p comm.DevicePtr, data []byte) error {
	b, err := m.slice(p, len(data))
	if err != nil {
		return err
	}
	copy(b, data)
	return nil
}

// Read copies n bytes from p.
func (m *HostMemory) Read(_ int, p comm.DevicePtr, n int) ([]byte, error) {
	b, err := m.slice(p, n)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}
