package flightrec

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Whatever the bytes, ReadTrace returns a trace or an error wrapping ErrFormat; it
// never panics.
func FuzzReadTrace(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "torch214-gloo-rank0.pickle")); err == nil {
		f.Add(b)
	}
	r, err := New(Config{Entries: 4, CallSites: true}, 0)
	if err != nil {
		f.Fatal(err)
	}
	defer r.Close()
	c, _ := r.Comm(Group{Name: "0", Ranks: []int{0, 1}})
	c.RecordGroup([]Call{{Op: Send, Peer: 1, In: 2, Out: 2, Type: Int8}, {Op: Recv, Peer: 1, In: 2, Out: 2, Type: Int8}})
	var buf bytes.Buffer
	if err := r.Dump(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(bomb())
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadTrace(bytes.NewReader(data))
		if err != nil && !errors.Is(err, ErrFormat) {
			t.Fatalf("error not wrapping ErrFormat: %v", err)
		}
		if err == nil {
			_ = Analyze([]*Trace{tr})
		}
	})
}
