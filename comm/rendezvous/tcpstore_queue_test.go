package rendezvous

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tsRaw is a hand-driven client of torch's protocol (generation 2), for the queries
// no torch client here can send (Debian's torch has no libuv: its client refuses the
// queue operations) and for checking answers byte by byte.
type tsRaw struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func tsDial(t testing.TB, addr string) *tsRaw {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	c := &tsRaw{t: t, nc: nc, br: bufio.NewReader(nc)}
	c.send(tsValidate, tsMagic)
	c.send(tsPing, uint32(0x1234))
	require.EqualValues(t, 0x1234, c.u32(), "ping")
	return c
}

// send writes query q with its arguments: string (a key or string), []byte (a
// vector), uint64 or int64, uint32.
func (c *tsRaw) send(q tsQuery, args ...any) {
	c.t.Helper()
	_, err := c.nc.Write(c.encode(q, args...))
	require.NoError(c.t, err)
}

// sendRefused is send of a query the server closes the connection on before it has
// read it all.
func (c *tsRaw) sendRefused(q tsQuery, args ...any) {
	c.t.Helper()
	_, _ = c.nc.Write(c.encode(q, args...))
}

func (c *tsRaw) encode(q tsQuery, args ...any) []byte {
	c.t.Helper()
	var w tsWriter
	b, ok := tsWire(TorchProtocol2, q)
	require.True(c.t, ok, "query %s", q)
	w.u8(b)
	for _, a := range args {
		switch v := a.(type) {
		case string:
			w.str(v)
		case []byte:
			w.vec(v)
		case int:
			w.u64(uint64(v))
		case int64:
			w.i64(v)
		case uint32:
			w.u32(v)
		default:
			c.t.Fatalf("tsRaw.send: argument %T", a)
		}
	}
	return w.bytes()
}

func (c *tsRaw) read(n int) []byte {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	b := make([]byte, n)
	_, err := io.ReadFull(c.br, b)
	require.NoError(c.t, err)
	return b
}

func (c *tsRaw) u8() byte    { return c.read(1)[0] }
func (c *tsRaw) u32() uint32 { return binary.LittleEndian.Uint32(c.read(4)) }
func (c *tsRaw) i64() int64  { return int64(binary.LittleEndian.Uint64(c.read(8))) }
func (c *tsRaw) vec() []byte { return c.read(int(c.i64())) }
func (c *tsRaw) str() string { return string(c.vec()) }
func (c *tsRaw) check(keys ...string) bool {
	c.t.Helper()
	args := []any{len(keys)}
	for _, k := range keys {
		args = append(args, k)
	}
	c.send(tsCheck, args...)
	return c.u8() == tsReady
}

// registered sends a CHECK of a key that does not exist after a blocked request and
// reads its answer: the server answers in order, so the request is registered.
func (c *tsRaw) registered() {
	c.t.Helper()
	require.False(c.t, c.check("/nothing-here"), "CHECK of a missing key")
}

// silent reports that nothing arrives from the server before a CANCEL_WAIT's answer:
// it sends CANCEL_WAIT and reads WAIT_CANCELED first.
func (c *tsRaw) cancelledUnanswered() {
	c.t.Helper()
	c.send(tsCancelWait)
	require.Equal(c.t, byte(tsWaitCancel), c.u8(), "the blocked request was answered before CANCEL_WAIT")
}

// closed reports whether the server closed the connection.
func (c *tsRaw) closed() bool {
	_ = c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.Copy(io.Discard, c.br)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout())
}

// torch's queue operations as its libuv server serves them: FIFO order, QUEUE_POP's
// length before the pop then the value, an empty queue's 0 alone, a blocking pop (WAIT
// then QUEUE_POP) woken one at a time by QUEUE_PUSH, its timeout (CANCEL_WAIT), and
// queues kept out of the key count and the key list.
func TestTorchQueues(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	c := tsDial(t, addr)
	c.send(tsQueueLen, "/q")
	require.EqualValues(t, 0, c.i64(), "length of a queue never pushed to")
	c.send(tsQueuePop, "/q")
	require.EqualValues(t, 0, c.i64(), "pop of an empty queue")
	require.False(t, c.check("/q"), "CHECK of an empty queue")
	for _, v := range []string{"a", "b", "c"} {
		c.send(tsQueuePush, "/q", []byte(v))
	}
	c.send(tsQueueLen, "/q")
	require.EqualValues(t, 3, c.i64())
	require.True(t, c.check("/q"), "CHECK of a queue that is not empty")
	c.send(tsNumKeys)
	require.EqualValues(t, 0, c.i64(), "GETNUMKEYS counts queues")
	c.send(tsListKeys)
	require.EqualValues(t, 0, c.i64(), "LIST_KEYS lists queues")
	for i, want := range []string{"a", "b", "c"} {
		c.send(tsQueuePop, "/q")
		require.EqualValues(t, 3-i, c.i64(), "length before pop %d", i)
		require.Equal(t, want, string(c.vec()), "pop %d", i)
	}
	c.send(tsQueuePop, "/q")
	require.EqualValues(t, 0, c.i64(), "pop of the emptied queue")
	c.send(tsQueueLen, "/q") // the empty pop's answer had nothing after its 0
	require.EqualValues(t, 0, c.i64())

	// Blocking pops: two clients wait for the queue; a push wakes the oldest only.
	a, b := tsDial(t, addr), tsDial(t, addr)
	a.send(tsWait, 1, "/jobs")
	a.registered()
	b.send(tsWait, 1, "/jobs")
	b.registered()
	c.send(tsQueuePush, "/jobs", []byte("job 1"))
	require.Equal(t, byte(tsStopWaiting), a.u8(), "the oldest waiter is woken by the push")
	a.send(tsQueuePop, "/jobs")
	require.EqualValues(t, 1, a.i64())
	require.Equal(t, "job 1", string(a.vec()))
	b.cancelledUnanswered() // the push woke a alone
	b.send(tsWait, 1, "/jobs")
	b.registered()
	c.send(tsQueuePush, "/jobs", []byte("job 2"))
	require.Equal(t, byte(tsStopWaiting), b.u8(), "the next waiter is woken by the next push")
	b.send(tsQueuePop, "/jobs")
	require.EqualValues(t, 1, b.i64())
	require.Equal(t, "job 2", string(b.vec()))

	// A blocking pop that times out: the client's CANCEL_WAIT, answered alone.
	a.send(tsWait, 1, "/jobs")
	a.registered()
	a.cancelledUnanswered()
	c.send(tsQueuePush, "/jobs", []byte("job 3")) // no one waits: it stays queued
	a.send(tsWait, 1, "/jobs")
	require.Equal(t, byte(tsStopWaiting), a.u8(), "WAIT for a queue that is not empty")
	a.send(tsQueuePop, "/jobs")
	require.EqualValues(t, 1, a.i64())
	require.Equal(t, "job 3", string(a.vec()))

	// A queue and a value under one key live side by side.
	c.send(tsSet, "/both", []byte("value"))
	c.send(tsQueuePush, "/both", []byte("queued"))
	c.send(tsGet, "/both")
	require.Equal(t, "value", c.str())
	c.send(tsQueuePop, "/both")
	require.EqualValues(t, 1, c.i64())
	require.Equal(t, "queued", string(c.vec()))
}

// A SET of a queue's key wakes every waiter, as for any key (torch's servers do the
// same); a waiter of ncclgo's own protocol is not woken by a push.
func TestTorchQueuePushWakesTorchWaitsOnly(t *testing.T) {
	noLeaks(t)
	s, addr := startServer(t)
	ctx := ctxTimeout(t, time.Minute)
	goWait := make(chan error, 1)
	gc := dial(t, addr)
	go func() { goWait <- gc.Wait(ctx, "q") }()
	eventually(t, "ncclgo's wait registered", func() bool { return s.st.numPending() == 1 })
	c := tsDial(t, addr)
	w := tsDial(t, addr)
	w.send(tsWait, 1, "/q")
	w.registered()
	c.send(tsQueuePush, "/q", []byte("x"))
	require.Equal(t, byte(tsStopWaiting), w.u8())
	c.send(tsQueueLen, "/q")
	require.EqualValues(t, 1, c.i64())
	select {
	case err := <-goWait:
		t.Fatalf("ncclgo's Wait for q returned (%v) on a push to the queue q", err)
	default:
	}
	c.send(tsSet, "/q", []byte("v"))
	require.NoError(t, <-goWait)
}

// LIST_KEYS lists every key, torch's and ncclgo's, as torch's client expects them (a
// "/" before each, which its client takes off).
func TestTorchListKeys(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	ctx := ctxTimeout(t, time.Minute)
	c := tsDial(t, addr)
	c.send(tsListKeys)
	require.EqualValues(t, 0, c.i64())
	c.send(tsSet, "/b", []byte("1"))
	c.send(tsSet, "/a", []byte("2"))
	c.send(tsSet, "/pfx/k", []byte("3"))
	require.NoError(t, dial(t, addr).Set(ctx, "from-go", nil))
	c.send(tsListKeys)
	n := c.i64()
	var keys []string
	for range n {
		keys = append(keys, c.str())
	}
	require.Equal(t, []string{"/a", "/b", "/from-go", "/pfx/k"}, keys)
	c.send(tsNumKeys)
	require.EqualValues(t, 4, c.i64())

	// A long list is written in pieces and arrives whole.
	want := 5000
	for i := range want {
		c.send(tsSet, "/many/"+strings.Repeat("k", 40)+string(rune('a'+i%26))+time.Duration(i).String(), []byte{})
	}
	c.send(tsListKeys)
	n = c.i64()
	require.EqualValues(t, want+4, n)
	for range n {
		require.True(t, strings.HasPrefix(c.str(), "/"))
	}
	c.send(tsNumKeys)
	require.EqualValues(t, want+4, c.i64())
}

// torch 2.14's BARRIER: a decimal counter under its key; the arrival that brings it to
// the world size is answered at once and wakes the others; a reused key passes at
// once; CANCEL_WAIT ends a waiting arrival; a SET of the key wakes its waiters, as on
// torch's servers.
func TestTorchBarrierQuery(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	ctx := ctxTimeout(t, time.Minute)
	r0, r1, r2 := tsDial(t, addr), tsDial(t, addr), tsDial(t, addr)
	r0.send(tsTorchBarrier, "/b", int64(3))
	r0.registered()
	r1.send(tsTorchBarrier, "/b", int64(3))
	r1.registered()
	// rank 1's arrival did not wake rank 0; a cancelled arrival still counts (torch's
	// client cancels on its timeout).
	r0.cancelledUnanswered()
	// A WAIT for the key returns at once (the counter exists), as on torch's servers.
	r2.send(tsWait, 1, "/b")
	require.Equal(t, byte(tsStopWaiting), r2.u8())
	v, err := dial(t, addr).Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, "2", string(v))
	r2.send(tsTorchBarrier, "/b", int64(3))
	require.Equal(t, byte(tsStopWaiting), r2.u8(), "the last arrival")
	require.Equal(t, byte(tsStopWaiting), r1.u8(), "rank 1 woken")
	r0.send(tsTorchBarrier, "/b", int64(3))
	require.Equal(t, byte(tsStopWaiting), r0.u8(), "a reused key: the counter is past the world")
	r0.send(tsGet, "/b")
	require.Equal(t, "4", r0.str())

	r0.send(tsTorchBarrier, "/t", int64(2))
	r0.registered()
	r0.cancelledUnanswered()
	r1.send(tsTorchBarrier, "/t", int64(3))
	r1.registered()
	r2.send(tsSet, "/t", []byte("0"))
	require.Equal(t, byte(tsStopWaiting), r1.u8(), "a SET of the counter wakes its waiters")

	// A counter that is not a number closes the connection (torch's server fails the
	// same way).
	r2.send(tsSet, "/word", []byte("abc"))
	r2.send(tsTorchBarrier, "/word", int64(2))
	require.True(t, r2.closed())
}

// The value limit: refused values close the connection with one warning that names
// the limit and how to raise it; WithMaxTorchValueBytes raises it.
func TestTorchValueLimit(t *testing.T) {
	noLeaks(t)
	logs := &logBuffer{}
	_, addr := startServer(t, WithLogger(logs.logger()))
	c := tsDial(t, addr)
	big := bytes.Repeat([]byte("v"), DefaultMaxTorchValueBytes+1)
	c.send(tsSet, "/big", big[:DefaultMaxTorchValueBytes])
	c.send(tsGet, "/big")
	require.Len(t, c.vec(), DefaultMaxTorchValueBytes, "a value of the limit")
	c.sendRefused(tsSet, "/big", big)
	require.True(t, c.closed(), "a value over the limit")
	eventually(t, "the warning", func() bool { return strings.Contains(logs.String(), "over the limit") })
	out := logs.String()
	assert.Contains(t, out, "limit=1048576")
	assert.Contains(t, out, "bytes=1048577")
	assert.Contains(t, out, "WithMaxTorchValueBytes")
	assert.Contains(t, out, "-max-torch-value-bytes")
	for _, q := range []tsQuery{tsQueuePush, tsAppend} {
		c := tsDial(t, addr)
		if q == tsAppend {
			c.send(tsAppend, "/grow", big[:DefaultMaxTorchValueBytes])
			c.send(tsAppend, "/grow", []byte("1"))
		} else {
			c.sendRefused(q, "/q", big)
		}
		require.True(t, c.closed(), "%s over the limit", q)
	}

	// MULTI_SET: its keys and values together are at most a value and 64 KiB.
	c = tsDial(t, addr)
	c.sendRefused(tsMultiSet, 2, "/m1", big[:600<<10], "/m2", big[:600<<10])
	require.True(t, c.closed(), "MULTI_SET over the limit")
	eventually(t, "the MULTI_SET warning", func() bool { return strings.Contains(logs.String(), "MULTI_SET of 2 keys") })

	const raised = 4 << 20
	_, addr = startServer(t, WithMaxTorchValueBytes(raised))
	c = tsDial(t, addr)
	huge := bytes.Repeat([]byte("w"), raised)
	c.send(tsSet, "/huge", huge)
	c.send(tsGet, "/huge")
	require.Equal(t, huge, c.vec())
	c.send(tsMultiSet, 2, "/m1", huge, "/m2", huge[:10])
	c.send(tsMultiGet, 2, "/m1", "/m2")
	require.Len(t, c.vec(), raised)
	require.Len(t, c.vec(), 10)
	c.sendRefused(tsSet, "/over", append(huge, 'x'))
	require.True(t, c.closed())
}

// A query no torch up to 2.14 sends closes its connection and is logged once per
// server, with its number and the torch it belongs to.
func TestTorchUnknownQueryLoggedOnce(t *testing.T) {
	noLeaks(t)
	logs := &logBuffer{}
	_, addr := startServer(t, WithLogger(logs.logger()))
	for range 3 {
		r := rawDial(t, addr)
		_, _ = r.nc.Write([]byte{0, 0xCE, 0xF7, 0x85, 0x3C, 19})
		require.True(t, r.closedByPeer())
	}
	for range 2 {
		r := rawDial(t, addr)
		_, _ = r.nc.Write(append([]byte{7}, le64(1)...)) // torch 1.x's WATCH_KEY
		require.True(t, r.closedByPeer())
	}
	r := rawDial(t, addr)
	// GETNUMKEYS, then QUEUE_PUSH's byte in protocol 2, which is no query of protocol 1.
	_, _ = r.nc.Write([]byte{6, 14})
	require.True(t, r.closedByPeer())
	eventually(t, "three warnings", func() bool { return strings.Count(logs.String(), "query is not served") >= 3 })
	out := logs.String()
	require.Equal(t, 3, strings.Count(out, "level=WARN"), out)
	assert.Contains(t, out, "query=19 protocol=2")
	assert.Contains(t, out, "newer torch")
	assert.Contains(t, out, "query=7 protocol=1")
	assert.Contains(t, out, "WATCH_KEY of torch 1.x")
	assert.Contains(t, out, "query=14 protocol=1")
	// The server still serves.
	c := tsDial(t, addr)
	c.send(tsAdd, "/n", int64(2))
	require.EqualValues(t, 2, c.i64())
}

// A torch WAIT holds the keys missing when it comes, not every key it names, and is
// charged for those alone (torch's server counts the keys it still awaits): in a
// bring-up where each rank waits for every rank's key, a WAIT holds the few still to
// come.
func TestTorchWaitHoldsOnlyTheKeysStillMissing(t *testing.T) {
	b := &budget{limit: 1 << 30}
	st := newStore(b)
	a := &account{share: &share{b: b, id: "test", limit: b.limit}}
	const n = 1000
	var keys keyList
	for i := range n {
		k := "rank/" + strconv.Itoa(i)
		keys.buf = append(keys.buf, k...)
		keys.ends = append(keys.ends, len(keys.buf))
		if i != 17 && i != 900 {
			require.NoError(t, st.set(a, k, nil))
		}
	}
	used := a.used.Load()
	fired := 0
	var release func()
	w, ready, err := st.torchWait(a, keys, func(r func()) { fired++; release = r })
	require.NoError(t, err)
	require.False(t, ready)
	require.Len(t, w.keys, 2, "keys held by the wait")
	assert.Equal(t, []string{"rank/17", "rank/900"}, w.keys)
	assert.Equal(t, waitCost(2, func(i int) int { return len(w.keys[i]) }), a.used.Load()-used)
	require.NoError(t, st.set(a, "rank/900", nil))
	require.Zero(t, fired)
	require.NoError(t, st.set(a, "rank/17", nil))
	require.Equal(t, 1, fired)
	release()
	assert.Zero(t, st.numPending())
}
