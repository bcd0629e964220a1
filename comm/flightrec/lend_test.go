package flightrec

import (
	"bytes"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDumpReadsALentRing holds a ring's external lock, as a backend does while it waits
// for NCCL: without Lend a dump waits for the lock; with it the dump is written at
// once, and Reclaim returns the ring for the next record.
func TestDumpReadsALentRing(t *testing.T) {
	var mu sync.Mutex
	r := newRecorder(t, Config{Entries: 8}, 0)
	c := newComm(t, r, Group{Name: "0", Ranks: []int{0, 1}, Lock: &mu})
	mu.Lock()
	c.Record(Call{Op: AllReduce, In: 4, Out: 4, Type: Float32})

	dumped := make(chan error, 1)
	go func() { dumped <- r.Dump(io.Discard) }()
	select {
	case <-dumped:
		t.Fatal("a dump read the ring while its lock's holder could write it")
	case <-time.After(50 * time.Millisecond):
	}

	c.Lend() // the dump already waiting now reads the lent ring
	select {
	case err := <-dumped:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("the dump waited for the lock although the ring was lent")
	}
	var buf bytes.Buffer
	require.NoError(t, r.Dump(&buf))
	tr, err := ReadTrace(&buf)
	require.NoError(t, err)
	require.Len(t, tr.Entries, 1)
	require.Equal(t, "all_reduce", tr.Entries[0].Op())
	c.Reclaim()
	c.Record(Call{Op: Broadcast, In: 4, Out: 4, Type: Float32})
	mu.Unlock()
	buf.Reset()
	require.NoError(t, r.Dump(&buf))
	tr, err = ReadTrace(&buf)
	require.NoError(t, err)
	require.Len(t, tr.Entries, 2)
}

// TestLendRacesDumps records, lends and reclaims on one goroutine while others dump
// without pause: under -race, no dump reads an entry while it is written.
func TestLendRacesDumps(t *testing.T) {
	var mu sync.Mutex
	r := newRecorder(t, Config{Entries: 4}, 0)
	c := newComm(t, r, Group{Name: "0", Ranks: []int{0, 1}, Lock: &mu})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := r.Dump(io.Discard); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := range 2000 {
		mu.Lock()
		c.Record(Call{Op: AllReduce, In: int64(i), Out: int64(i), Type: Float32})
		c.Lend()
		if i%7 == 0 {
			time.Sleep(10 * time.Microsecond)
		}
		c.Reclaim()
		c.Record(Call{Op: Send, Peer: 1, In: 1, Out: 1, Type: Float32})
		mu.Unlock()
	}
	close(stop)
	wg.Wait()
	var nilComm *Comm
	nilComm.Lend() // a nil ring is off: nothing to lend
	nilComm.Reclaim()
}

// TestReclaimWithoutLendReturns: a Reclaim that finds the ring held (no Lend before it,
// or a second Reclaim) returns at once instead of waiting for a Lend that never comes.
func TestReclaimWithoutLendReturns(t *testing.T) {
	var mu sync.Mutex
	r := newRecorder(t, Config{Entries: 4}, 0)
	c := newComm(t, r, Group{Name: "0", Ranks: []int{0, 1}, Lock: &mu})
	done := make(chan struct{})
	go func() {
		mu.Lock()
		c.Reclaim()
		c.Lend()
		c.Reclaim()
		c.Reclaim()
		mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Reclaim without a Lend waited")
	}
	require.NoError(t, r.Dump(io.Discard))
}
