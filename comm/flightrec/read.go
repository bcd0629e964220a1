package flightrec

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Trace is one rank's dump, as ncclgo and PyTorch write it.
type Trace struct {
	// Rank is the global rank the dump's file name gives (-1 when read from a
	// stream).
	Rank int
	// File is the file it was read from.
	File           string
	Version        string
	CommLibVersion string
	// Groups are the communicators the rank knew (pg_config), by name.
	Groups map[string]GroupConfig
	// Entries are its records, in record order.
	Entries []Entry
}

// GroupConfig is one communicator of a dump's pg_config.
type GroupConfig struct {
	Name, Desc string
	// Ranks are the global ranks of its members.
	Ranks []int
}

// Entry is one record of a dump.
type Entry struct {
	RecordID      int64
	PGID          int64
	Group, Desc   string // process_group: the communicator's name and description
	CollectiveSeq int64
	P2PSeq        int64
	OpID          int64
	// ProfilingName is the backend and operation ("nccl:all_reduce",
	// "nccl:send 0->1").
	ProfilingName string
	InputSizes    [][]int64
	InputTypes    []string
	OutputSizes   [][]int64
	OutputTypes   []string
	// State is "scheduled", "started" or "completed".
	State string
	// Created, Started and Completed are Unix nanoseconds; 0 when not known.
	Created, Started, Completed int64
	Retired                     bool
	TimeoutMS                   int64
	IsP2P                       bool
	Frames                      []Frame
}

// Frame is one frame of an entry's call stack.
type Frame struct {
	Name, File string
	Line       int64
}

// Op returns the operation's name without the backend and peers ("all_reduce",
// "send").
func (e *Entry) Op() string {
	_, name, _ := strings.Cut(e.ProfilingName, ":")
	name, _, _ = strings.Cut(name, " ")
	return name
}

// Seq is the entry's sequence number: point-to-point for point-to-point entries,
// collective otherwise.
func (e *Entry) Seq() int64 {
	if e.IsP2P {
		return e.P2PSeq
	}
	return e.CollectiveSeq
}

// maxDump bounds the size of a dump ReadTrace accepts.
const maxDump = 1 << 30

// ReadTrace reads one dump (a pickle as PyTorch's flight recorder or Dump writes it).
// A stream that is not one is an error wrapping ErrFormat.
func ReadTrace(r io.Reader) (*Trace, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxDump+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxDump {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrFormat, maxDump)
	}
	v, err := unpickle(data)
	if err != nil {
		return nil, err
	}
	return decodeTrace(v)
}

// ReadFile reads the dump in path; its rank is the number that ends the file name.
func ReadFile(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := ReadTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.File = path
	t.Rank = -1
	if m := rankSuffix.FindStringSubmatch(filepath.Base(path)); m != nil {
		t.Rank, _ = strconv.Atoi(m[2])
	}
	return t, nil
}

// rankSuffix splits a dump's file name into its prefix and rank (as torch's loader
// does).
var rankSuffix = regexp.MustCompile(`^([\w\-]*?)(\d+)$`)

// ReadDir reads the dumps in dir whose names are prefix followed by a rank; an empty
// prefix means the one prefix all such names share (an error naming them when they
// share none), as torch's analyzer infers it. Files starting with "." are skipped.
func ReadDir(dir, prefix string) ([]*Trace, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	prefixes := map[string]bool{}
	for _, de := range des {
		if de.IsDir() || strings.HasPrefix(de.Name(), ".") {
			continue
		}
		m := rankSuffix.FindStringSubmatch(de.Name())
		if m == nil || (prefix != "" && m[1] != prefix) {
			continue
		}
		prefixes[m[1]] = true
		names = append(names, de.Name())
	}
	if len(prefixes) > 1 {
		ps := make([]string, 0, len(prefixes))
		for p := range prefixes {
			ps = append(ps, strconv.Quote(p))
		}
		slices.Sort(ps)
		return nil, fmt.Errorf("%w: %s holds dumps of several prefixes (%s): name one", ErrFormat, dir, strings.Join(ps, ", "))
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no dump in %s (want files named <prefix><rank>)", fs.ErrNotExist, dir)
	}
	var out []*Trace
	for _, n := range names {
		t, err := ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *Trace) int { return a.Rank - b.Rank })
	return out, nil
}

// fields reads a pickled dict's fields, remembering the first error.
type fields struct {
	m    map[any]any
	what string
	err  error
}

func (f *fields) fail(key, want string, v any) {
	if f.err == nil {
		f.err = fmt.Errorf("%w: %s: %s is %s, want %s", ErrFormat, f.what, key, typeName(v), want)
	}
}

func (f *fields) str(key string, required bool) string {
	v, ok := f.m[key]
	if !ok && !required {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		f.fail(key, "str", v)
	}
	return s
}

func (f *fields) int(key string, optional bool) int64 {
	v, ok := f.m[key]
	if optional && (!ok || v == nil) {
		return 0
	}
	switch x := v.(type) {
	case int64:
		return x
	case float64:
		return int64(x)
	}
	f.fail(key, "int", v)
	return 0
}

func (f *fields) bool(key string) bool {
	v, ok := f.m[key]
	if !ok {
		return false
	}
	b, ok := v.(bool)
	if !ok {
		f.fail(key, "bool", v)
	}
	return b
}

func (f *fields) dict(key string) map[any]any {
	v := f.m[key]
	d, ok := v.(map[any]any)
	if !ok {
		f.fail(key, "dict", v)
	}
	return d
}

func (f *fields) list(key string, optional bool) []any {
	v, ok := f.m[key]
	if optional && !ok {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		f.fail(key, "list", v)
	}
	return l
}

func (f *fields) strs(key string) []string {
	var out []string
	for _, v := range f.list(key, true) {
		s, ok := v.(string)
		if !ok {
			f.fail(key, "a list of str", v)
			return nil
		}
		out = append(out, s)
	}
	return out
}

func (f *fields) sizes(key string) [][]int64 {
	var out [][]int64
	for _, v := range f.list(key, true) {
		l, ok := v.([]any)
		if !ok {
			f.fail(key, "a list of lists of int", v)
			return nil
		}
		dims := make([]int64, 0, len(l))
		for _, d := range l {
			n, ok := d.(int64)
			if !ok {
				f.fail(key, "a list of lists of int", d)
				return nil
			}
			dims = append(dims, n)
		}
		out = append(out, dims)
	}
	return out
}

func decodeTrace(v any) (*Trace, error) {
	top, ok := v.(map[any]any)
	if !ok {
		return nil, fmt.Errorf("%w: top level is %s, want dict", ErrFormat, typeName(v))
	}
	f := &fields{m: top, what: "dump"}
	t := &Trace{Rank: -1, Version: f.str("version", true), CommLibVersion: f.str("comm_lib_version", false),
		Groups: map[string]GroupConfig{}}
	for k, gv := range f.dict("pg_config") {
		name, _ := k.(string)
		gd, ok := gv.(map[any]any)
		if !ok {
			f.fail("pg_config["+strconv.Quote(name)+"]", "dict", gv)
			break
		}
		g := &fields{m: gd, what: "pg_config[" + strconv.Quote(name) + "]"}
		gc := GroupConfig{Name: g.str("name", false), Desc: g.str("desc", false)}
		rs := strings.Trim(strings.TrimSpace(g.str("ranks", true)), "[]")
		for _, s := range strings.Split(rs, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			n, err := strconv.Atoi(s)
			if err != nil {
				g.fail("ranks", "a list of ranks", gd["ranks"])
				break
			}
			gc.Ranks = append(gc.Ranks, n)
		}
		if g.err != nil {
			return nil, g.err
		}
		t.Groups[name] = gc
	}
	for i, ev := range f.list("entries", false) {
		ed, ok := ev.(map[any]any)
		if !ok {
			f.fail("entries["+strconv.Itoa(i)+"]", "dict", ev)
			break
		}
		e := &fields{m: ed, what: "entry " + strconv.Itoa(i)}
		ent := Entry{RecordID: e.int("record_id", false), PGID: e.int("pg_id", true),
			CollectiveSeq: e.int("collective_seq_id", false), P2PSeq: e.int("p2p_seq_id", true),
			OpID: e.int("op_id", true), ProfilingName: e.str("profiling_name", true),
			InputSizes: e.sizes("input_sizes"), InputTypes: e.strs("input_dtypes"),
			OutputSizes: e.sizes("output_sizes"), OutputTypes: e.strs("output_dtypes"),
			State: e.str("state", true), Created: e.int("time_created_ns", true),
			Started: e.int("time_discovered_started_ns", true), Completed: e.int("time_discovered_completed_ns", true),
			Retired: e.bool("retired"), TimeoutMS: e.int("timeout_ms", true), IsP2P: e.bool("is_p2p")}
		switch pg := ed["process_group"].(type) {
		case Tuple:
			if len(pg) == 2 {
				ent.Group, _ = pg[0].(string)
				ent.Desc, _ = pg[1].(string)
			}
		default:
			e.fail("process_group", "a tuple (name, desc)", pg)
		}
		for _, fv := range e.list("frames", true) {
			fd, ok := fv.(map[any]any)
			if !ok {
				e.fail("frames", "a list of dicts", fv)
				break
			}
			ff := &fields{m: fd, what: e.what + " frame"}
			ent.Frames = append(ent.Frames, Frame{Name: ff.str("name", false), File: ff.str("filename", false), Line: ff.int("line", true)})
			if ff.err != nil {
				e.err = errors.Join(e.err, ff.err)
			}
		}
		if e.err != nil {
			return nil, e.err
		}
		t.Entries = append(t.Entries, ent)
	}
	if f.err != nil {
		return nil, f.err
	}
	return t, nil
}
