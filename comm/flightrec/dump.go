package flightrec

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
)

// snap is a copy of one entry with its communicator, for a dump.
type snap struct {
	c  *Comm
	e  entry
	pc uintptr // its call site, 0 when not recorded
}

// snapshot copies the live entries of every communicator, in record order, taking
// each ring's lock in turn, or borrowing a ring that its lock's holder lent (Lend).
func (r *Recorder) snapshot() (comms []*Comm, status []pgStatus, entries []snap) {
	r.mu.Lock()
	comms = slices.Clone(r.comms)
	r.mu.Unlock()
	for _, c := range comms {
		c.read(func() {
			c.applyMarks()
			n := min(c.next, ID(len(c.ring)))
			for id := c.next - n + 1; id <= c.next; id++ {
				if e := c.slot(id); e != nil {
					var pc uintptr
					if c.pcs != nil {
						pc = c.pcs[c.index(id)]
					}
					entries = append(entries, snap{c, *e, pc})
				}
			}
			status = append(status, pgStatus{enqueued: c.collSeq, started: c.lastStarted, completed: c.lastCompleted})
		})
	}
	slices.SortFunc(entries, func(a, b snap) int { return cmp.Compare(a.e.record, b.e.record) })
	return comms, status, entries
}

type pgStatus struct{ enqueued, started, completed int64 }

// Dump writes the recorder's records to w in the format of PyTorch's flight recorder
// (a pickled dict; version Version), which torch's analyzer
// (python3 -m torch.distributed.flight_recorder.fr_trace) and ReadTrace read.
func (r *Recorder) Dump(w io.Writer) error {
	if r == nil {
		return ErrOff
	}
	var p pickler
	r.encode(&p)
	_, err := w.Write(p.b)
	return err
}

// WriteFile writes the dump to Path (creating its directory), through a temporary
// file renamed into place so that a reader never sees half a dump, and returns the
// path.
func (r *Recorder) WriteFile() (string, error) {
	if r == nil {
		return "", ErrOff
	}
	path := r.Path()
	var buf bytes.Buffer
	if err := r.Dump(&buf); err != nil {
		return "", err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("flightrec: dump directory: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return "", fmt.Errorf("flightrec: dump: %w", err)
	}
	_, err = f.Write(buf.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("flightrec: dump to %s: %w", path, err)
	}
	return path, nil
}

var stateNames = [...]string{"scheduled", "started", "completed"}

func (r *Recorder) encode(p *pickler) {
	comms, status, entries := r.snapshot()
	p.b = slices.Grow(p.b, 256+400*len(entries))
	p.begin()
	p.dict()
	p.key("version")
	p.str(Version)
	p.key("pg_config")
	p.dict()
	for _, c := range comms {
		p.str(c.g.Name)
		p.dict()
		p.key("name")
		p.str(c.g.Name)
		p.key("desc")
		p.str(c.g.Desc)
		p.key("ranks")
		p.str(ranksString(c.g.Ranks))
		p.endDict()
	}
	p.endDict()
	p.key("comm_lib_version")
	p.str(r.cfg.LibVersion)
	p.key("pg_status")
	p.dict()
	for i, c := range comms {
		p.str(strconv.Itoa(c.g.ID))
		p.dict()
		p.key("last_enqueued_collective")
		p.int(status[i].enqueued)
		p.key("last_started_collective")
		p.int(status[i].started)
		p.key("last_completed_collective")
		p.int(status[i].completed)
		p.endDict()
	}
	p.endDict()
	p.key("entries")
	p.list()
	frames := map[uintptr]runtime.Frame{}
	var name []byte
	for i := range entries {
		c, e, pc := entries[i].c, &entries[i].e, entries[i].pc
		p.dict()
		p.key("record_id")
		p.int(int64(e.record))
		p.key("pg_id")
		p.int(int64(c.g.ID))
		p.key("process_group")
		p.str(c.g.Name)
		p.str(c.g.Desc)
		p.tuple2()
		p.key("collective_seq_id")
		p.int(e.collSeq)
		p.key("p2p_seq_id")
		p.int(e.p2pSeq)
		p.key("op_id")
		p.int(e.opID)
		p.key("profiling_name")
		name = append(append(append(name[:0], c.g.Backend...), ':'), e.op.String()...)
		switch e.op {
		case Send, PutSignal, Signal:
			name = fmt.Appendf(name, " %d->%d", c.self, e.peer)
		case Recv, WaitSignal:
			name = fmt.Appendf(name, " %d<-%d", c.self, e.peer)
		}
		p.str(string(name))
		p.key("time_created_ns")
		p.int(r.wall(e.created))
		sized := e.op != Barrier && e.op != Coalesced
		p.key("input_sizes")
		sizes(p, e.in, sized)
		p.key("input_dtypes")
		dtypes(p, e.dtype, sized)
		p.key("output_sizes")
		sizes(p, e.out, sized)
		p.key("output_dtypes")
		dtypes(p, e.dtype, sized)
		p.key("state")
		p.str(stateNames[e.state])
		p.key("time_discovered_started_ns")
		p.optInt(r.wall(e.started), e.state >= started)
		p.key("time_discovered_completed_ns")
		p.optInt(r.wall(e.completed), e.state == completed)
		p.key("retired")
		p.bool(e.state == completed)
		p.key("timeout_ms")
		p.int(c.g.Timeout.Milliseconds())
		p.key("is_p2p")
		p.bool(e.isP2P())
		p.key("frames")
		p.list()
		if pc != 0 {
			f, ok := frames[pc]
			if !ok {
				f, _ = runtime.CallersFrames([]uintptr{pc}).Next()
				frames[pc] = f
			}
			p.dict()
			p.key("name")
			p.str(f.Function)
			p.key("filename")
			p.str(f.File)
			p.key("line")
			p.int(int64(f.Line))
			p.endDict()
		}
		p.endList()
		p.endDict()
	}
	p.endList()
	p.endDict()
	p.end()
}

func sizes(p *pickler, n int64, sized bool) {
	p.list()
	if sized {
		p.list()
		p.int(n)
		p.endList()
	}
	p.endList()
}

func dtypes(p *pickler, d DType, sized bool) {
	p.list()
	if sized {
		p.str(d.String())
	}
	p.endList()
}

// ranksString formats ranks as Python prints a list ("[0, 1]"), the form pg_config
// holds them in.
func ranksString(ranks []int) string {
	b := []byte{'['}
	for i, r := range ranks {
		if i > 0 {
			b = append(b, ',', ' ')
		}
		b = strconv.AppendInt(b, int64(r), 10)
	}
	return string(append(b, ']'))
}
