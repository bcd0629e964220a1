package sim

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// DefaultVersion is the NCCL version a World reports unless WithVersion says otherwise.
const DefaultVersion = 22907

// First NCCL versions of the functions the backend's driver interface (comm/internal/gpulib) uses beyond the 2.14 baseline.
const (
	sinceSplit    = 21800
	sinceMemAlloc = 21900 // ncclMemAlloc/Free, ncclCommRegister/Deregister
	sinceWindow   = 22703 // ncclCommWindowRegister/Deregister
	sinceShrink   = 22703
	sinceRevoke   = 22807
	sinceAlltoAll = 22803 // ncclAlltoAll, ncclGather, ncclScatter
)

// World is a simulated set of devices and the NCCL library that connects them. All
// methods are safe for concurrent use. Close it to stop every goroutine it started.
type World struct {
	mu sync.Mutex // guards everything below except device memory (device.mu)

	version         int
	memLimit        uint64
	inProgressPolls int
	machine         Machine // what ncclCommQueryProperties and the device API see (devapi.go)

	serial  uint64 // distinguishes worlds' unique ids
	nextID  uint64
	next    uint64 // last handle given out
	devices []*device
	drivers []*Driver
	streams map[gpulib.Stream]*stream
	events  map[gpulib.Event]*event
	funcs   map[gpulib.Function]*function
	kernels map[string]Kernel
	comms   map[gpulib.Comm]*rankComm
	boots   map[gpulib.UniqueID]*clique // unique ids not yet used up by ncclCommInitRank
	groups  map[int]*groupState         // per OS thread: its open group (group.go)
	graphs  map[gpulib.Handle]*graph    // captured and executable graphs (graph.go)
	closed  bool
	done    chan struct{} // closed by Close
	wg      sync.WaitGroup

	elastic elasticState // ncclCommGrow and ncclCommInitRankScalable (elastic.go)
}

// Option configures a World.
type Option func(*World)

// WithVersion sets the NCCL version the simulated library reports (e.g. 22203 for
// 2.22.3). Functions newer than the version fail with *MissingSymbolError.
func WithVersion(v int) Option { return func(w *World) { w.version = v } }

// WithMemoryLimit caps each device's memory at bytes (cuMemAlloc beyond it fails with
// CUDA_ERROR_OUT_OF_MEMORY). 0, the default, means no limit.
func WithMemoryLimit(bytes uint64) Option { return func(w *World) { w.memLimit = bytes } }

// WithInProgress makes every communication call (and ncclCommSuspend/Resume) on a
// non-blocking communicator return ncclInProgress, with the communicator reporting
// ncclInProgress for the next polls calls of ncclCommGetAsyncError, the way NCCL does
// while it connects lazily. The work itself is queued at once.
func WithInProgress(polls int) Option { return func(w *World) { w.inProgressPolls = polls } }

var worldSerial struct {
	sync.Mutex
	n uint64
}

// New returns a world of devices devices.
func New(devices int, opts ...Option) (*World, error) {
	if devices < 1 {
		return nil, fmt.Errorf("new world: devices %d: need at least 1", devices)
	}
	worldSerial.Lock()
	worldSerial.n++
	serial := worldSerial.n
	worldSerial.Unlock()
	w := &World{
		version: DefaultVersion,
		serial:  serial,
		next:    0x1000,
		streams: map[gpulib.Stream]*stream{},
		events:  map[gpulib.Event]*event{},
		funcs:   map[gpulib.Function]*function{},
		kernels: builtinKernels(),
		comms:   map[gpulib.Comm]*rankComm{},
		boots:   map[gpulib.UniqueID]*clique{},
		groups:  map[int]*groupState{},
		done:    make(chan struct{}),
	}
	for _, o := range opts {
		o(w)
	}
	if w.version < 21400 {
		return nil, fmt.Errorf("new world: version %d: the backend needs NCCL 2.14 (21400) or newer", w.version)
	}
	for i := range devices {
		d := newDevice(i, w.memLimit)
		d.def = &stream{h: 0, dev: d}
		w.devices = append(w.devices, d)
		w.drivers = append(w.drivers, &Driver{w: w, dev: d, calls: map[string]int64{}, fails: map[string][]error{}})
	}
	return w, nil
}

// Devices returns the number of devices.
func (w *World) Devices() int { return len(w.devices) }

// Version returns the NCCL version the world simulates.
func (w *World) Version() int { return w.version }

// Driver returns the gpulib.Driver of device dev.
func (w *World) Driver(dev int) (*Driver, error) {
	if dev < 0 || dev >= len(w.devices) {
		return nil, fmt.Errorf("driver: device %d out of range [0, %d)", dev, len(w.devices))
	}
	return w.drivers[dev], nil
}

// Close stops the world: every blocked call returns an error, queued work is dropped,
// and every goroutine the world started has ended when Close returns. Calls afterwards
// fail. Close is idempotent.
func (w *World) Close() error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.done)
		for _, d := range w.devices {
			d.halt()
		}
	}
	w.mu.Unlock()
	w.wg.Wait()
	return nil
}

// handle returns a new handle value; handles of every kind share one counter so that one
// kind passed for another is caught. Caller holds w.mu.
func (w *World) handle() uintptr {
	w.next += 0x10
	return uintptr(w.next)
}

// newUniqueID makes a unique id that only this world accepts. Caller holds w.mu.
func (w *World) newUniqueID() gpulib.UniqueID {
	w.nextID++
	var id gpulib.UniqueID
	copy(id[:], "ncclgo-sim")
	binary.LittleEndian.PutUint64(id[16:], w.serial)
	binary.LittleEndian.PutUint64(id[24:], w.nextID)
	return id
}

// go runs f on a goroutine that Close waits for. Caller holds w.mu.
func (w *World) goLocked(f func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		f()
	}()
}
