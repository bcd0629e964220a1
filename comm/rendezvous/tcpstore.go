package rendezvous

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// PyTorch's TCPStore protocol (torch.distributed.TCPStore, the store torchrun's agent
// serves), as read from PyTorch's TCPStore.cpp and TCPStoreBackend.{hpp,cpp}. There are
// no frames and no authentication: a request is a query byte followed by its
// arguments, integers in the host's byte order (little-endian on every machine torch
// runs on), strings and byte vectors as a uint64 length and that many bytes. One
// connection carries one request at a time, except that a waiting client may send
// CANCEL_WAIT.
//
//	query        arguments                        reply
//	SET          key, value                       (none)
//	COMPARE_SET  key, expected, desired           vector: the value now stored, or
//	                                              expected when the key is absent and
//	                                              expected is not empty
//	GET          key                              vector (the key must exist)
//	ADD          key, int64 delta                 int64: the new value (stored as
//	                                              decimal text)
//	CHECK        uint64 n, n keys                 uint8: 0 all exist, 1 not
//	WAIT         uint64 n, n keys                 uint8 0, once all exist
//	GETNUMKEYS   (none)                           int64
//	DELETE_KEY   key                              int64: keys deleted (0 or 1)
//	APPEND       key, value                       (none)
//	MULTI_GET    uint64 n, n keys                 n vectors
//	MULTI_SET    uint64 n, n (key, value)         (none)
//	CANCEL_WAIT  (none)                           uint8 1 (after a pending wait's 0,
//	                                              if the keys came first)
//	VALIDATE     uint32 0x3C85F7CE                (none)
//	PING         uint32 nonce                     uint32: the nonce
//	QUEUE_PUSH   key, value                       (none)
//	QUEUE_POP    key                              int64: the queue's length before the
//	                                              pop, then (when not 0) a vector: its
//	                                              oldest value, taken off the queue
//	QUEUE_LEN    key                              int64
//	LIST_KEYS    (none)                           int64 n, n strings: every key
//	BARRIER      key, int64 world                 uint8 0 once the decimal counter
//	                                              under key, which each BARRIER adds
//	                                              1 to, reaches world
//
// Queues are a key space of their own: their keys are not counted by GETNUMKEYS or
// listed by LIST_KEYS, but CHECK and WAIT find a key whose queue is not empty, and a
// QUEUE_PUSH wakes the oldest WAIT for its key (one, as the pop it precedes takes one
// value). A blocking pop is a WAIT for the queue's key, then QUEUE_POP.
//
// Two generations number the queries differently:
//
//	generation 1 (torch 1.x, and 2.x before the validation query):
//	  SET 0, COMPARE_SET 1, GET 2, ADD 3, CHECK 4, WAIT 5, GETNUMKEYS 6, WATCH_KEY 7,
//	  DELETE_KEY 8, then (2.x only) APPEND 9, MULTI_GET 10, MULTI_SET 11, CANCEL_WAIT 12
//	generation 2 (torch 2.x with the validation query, 2.6 and 2.14 among them):
//	  VALIDATE 0, SET 1, COMPARE_SET 2, GET 3, ADD 4, CHECK 5, WAIT 6, GETNUMKEYS 7,
//	  DELETE_KEY 8, APPEND 9, MULTI_GET 10, MULTI_SET 11, CANCEL_WAIT 12, PING 13,
//	  then (torch 2.14: QUEUE_* in torch's libuv server only, LIST_KEYS and BARRIER in
//	  both of its servers) QUEUE_PUSH 14, QUEUE_POP 15, QUEUE_LEN 16, LIST_KEYS 17,
//	  BARRIER 18 (each number as torch 2.14.1's client sends it: LIST_KEYS and BARRIER
//	  captured on the wire, the queue queries read from its libtorch_cpu, whose
//	  client refuses to send them without libuv)
//
// A generation 2 client opens every connection with VALIDATE and the magic number,
// then PING; so a server tells them apart from the first five bytes: a 0 followed by
// the magic (CE F7 85 3C) is generation 2, any other first query is generation 1, and
// ncclgo's own hello starts with a frame length whose first two bytes are 0 and whose
// fifth byte is the hello op.
//
// torch's Python TCPStore puts "/" before every key it sends, and a PrefixStore puts
// its prefix and "/" before that ("/" + prefix + "/" + key). ncclgo's server maps a
// torch key "/k" to its store key "k", so that Python's store.set("k", v) and Go's
// Client.Get(ctx, "k") meet; a key sent without the "/" is used as it is.

// tsQuery is a query in generation 2's numbering, which the server and client use
// for both generations.
type tsQuery uint8

const (
	tsValidate tsQuery = iota
	tsSet
	tsCompareSet
	tsGet
	tsAdd
	tsCheck
	tsWait
	tsNumKeys
	tsDelete
	tsAppend
	tsMultiGet
	tsMultiSet
	tsCancelWait
	tsPing
	tsQueuePush
	tsQueuePop
	tsQueueLen
	tsListKeys
	tsTorchBarrier
	// tsWatchKey is generation 1's WATCH_KEY, which ncclgo does not serve.
	tsWatchKey tsQuery = 0xff
	// tsUnknown is a generation 1 byte that no query of that generation has.
	tsUnknown tsQuery = 0xfe
)

// ncclgo's extensions of torch's protocol, the same byte in both generations and
// used by no generation of torch's. Only ncclgo's server answers them, so a
// TCPStoreClient sends them only after a CHECK of tsBarrierProbe, a key only ncclgo's
// server reports (torch's says it does not exist), said so. They give a torch
// connection the server's own barriers, the ones Client.Barrier uses, and its
// countdown latches, Client.Arrive's (a bring-up's join in one request):
//
//	query          arguments                     reply
//	BARRIER        key, uint64 rank, world       uint8 0 once every rank arrived; or
//	                                             uint8 code (1 invalid argument, 2
//	                                             store full, 3 other) and a vector: why
//	BARRIER_STATE  key                           uint8 flags (1 some rank arrived, 2
//	                                             done), uint64 world, vector: bitmap of
//	                                             the ranks that arrived
//	ARRIVE         done key, vector done value,  uint8 0 once answered (Client.Arrive's
//	               counter key, uint64 target,   rules), uint64 n and n vectors: the
//	               uint64 n, n (key, vector      fields of ncclgo's arrive reply; or a
//	               value) to create, uint64 m,   BARRIER's failure, code 4 for a
//	               m keys to read                counter that is not one
const (
	tsBarrier      tsQuery = 0x40
	tsBarrierState tsQuery = 0x41
	tsArrive       tsQuery = 0x42
)

// tsBarrierProbe is the key whose CHECK tells ncclgo's server (ready) from torch's.
const tsBarrierProbe = "\x00ncclgo/server-barriers"

// Codes of a failed BARRIER.
const (
	tsBarrierInvalid = 1
	tsBarrierFull    = 2
	tsBarrierFailed  = 3
	// tsArriveNotCounter: an ARRIVE whose counter holds something else (ErrNotCounter).
	tsArriveNotCounter = 4
)

var tsQueryNames = [...]string{"VALIDATE", "SET", "COMPARE_SET", "GET", "ADD", "CHECK", "WAIT", "GETNUMKEYS", "DELETE_KEY", "APPEND", "MULTI_GET", "MULTI_SET", "CANCEL_WAIT", "PING", "QUEUE_PUSH", "QUEUE_POP", "QUEUE_LEN", "LIST_KEYS", "BARRIER"}

func (q tsQuery) String() string {
	if int(q) < len(tsQueryNames) {
		return tsQueryNames[q]
	}
	switch q {
	case tsWatchKey:
		return "WATCH_KEY"
	case tsUnknown:
		return "unknown query"
	case tsBarrier:
		return "BARRIER (ncclgo)"
	case tsBarrierState:
		return "BARRIER_STATE (ncclgo)"
	case tsArrive:
		return "ARRIVE (ncclgo)"
	}
	return fmt.Sprintf("query(%d)", uint8(q))
}

// tsMagic is the number a generation 2 client sends with VALIDATE.
const tsMagic uint32 = 0x3C85F7CE

// Replies of CHECK and WAIT.
const (
	tsReady       = 0 // CHECK: all keys exist
	tsNotReady    = 1 // CHECK: some key does not
	tsStopWaiting = 0 // WAIT: all keys exist
	tsWaitCancel  = 1 // CANCEL_WAIT done
)

// TorchProtocol selects a generation of PyTorch's TCPStore protocol.
type TorchProtocol int

const (
	// TorchProtocolAuto tries generation 2 and falls back to generation 1 when the
	// server closes the connection on the validation query.
	TorchProtocolAuto TorchProtocol = 0
	// TorchProtocol1 is torch 1.x's protocol (no validation query, SET is 0).
	TorchProtocol1 TorchProtocol = 1
	// TorchProtocol2 is torch >= 2.x's protocol (VALIDATE first, SET is 1).
	TorchProtocol2 TorchProtocol = 2
)

// tsWire is the query byte of q in generation gen, and whether gen has q.
func tsWire(gen TorchProtocol, q tsQuery) (byte, bool) {
	if q == tsBarrier || q == tsBarrierState || q == tsArrive {
		return byte(q), true
	}
	if gen == TorchProtocol2 {
		return byte(q), q <= tsTorchBarrier
	}
	switch {
	case q == tsValidate || q == tsPing:
		return 0, false
	case q <= tsNumKeys:
		return byte(q) - 1, true
	case q <= tsCancelWait:
		return byte(q), true
	}
	return 0, false
}

// tsFromWire is the query that byte b means in generation gen.
func tsFromWire(gen TorchProtocol, b byte) tsQuery {
	if gen == TorchProtocol2 {
		return tsQuery(b)
	}
	switch {
	case b <= 6:
		return tsQuery(b + 1)
	case b == 7:
		return tsWatchKey
	case b <= byte(tsCancelWait) || b == byte(tsBarrier) || b == byte(tsBarrierState) || b == byte(tsArrive):
		return tsQuery(b)
	}
	return tsUnknown // generation 1 stops at CANCEL_WAIT
}

// tsReader reads the protocol's integers, strings and vectors with limits checked
// before anything is allocated; a long vector's buffer grows as its bytes arrive.
type tsReader struct {
	r       *bufio.Reader
	scratch [8]byte
	// charge, when set (the server's side), takes n more bytes of vector buffers
	// (n < 0: gives them back) from the connection's share of the budget; held is what
	// it holds, for the caller to give back once the request is handled.
	charge charger
	held   int64
	// spare is the buffers of the keys of the last query of a few short keys (most
	// CHECK, WAIT and GET queries), reused by the next one: part of the connection's
	// fixed cost (connOverhead), charged to no query. A parked connection gives them
	// back to the server's free list (bufs), and takes them again from there.
	spare keyList
}

// Bounds of the keys read into tsReader.spare.
const (
	spareKeys     = 8
	spareKeyBytes = 512
)

// charger takes n bytes of buffers (n < 0: gives them back) from a share of the
// server's budget (torchConn.chargeBuf).
type charger interface{ chargeBuf(n int64) error }

// reserve charges n bytes of buffer, when the reader charges.
func (t *tsReader) reserve(n int64) error {
	if t.charge == nil || n == 0 {
		return nil
	}
	if err := t.charge.chargeBuf(n); err != nil {
		return err
	}
	t.held += n
	return nil
}

func (t *tsReader) u8() (byte, error) { return t.r.ReadByte() }

func (t *tsReader) u32() (uint32, error) {
	if _, err := io.ReadFull(t.r, t.scratch[:4]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(t.scratch[:4]), nil
}

func (t *tsReader) u64() (uint64, error) {
	if _, err := io.ReadFull(t.r, t.scratch[:8]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(t.scratch[:8]), nil
}

// count reads a number of arguments, at most limit.
func (t *tsReader) count(what string, limit int) (int, error) {
	n, err := t.u64()
	if err != nil {
		return 0, err
	}
	if n > uint64(limit) {
		return 0, fmt.Errorf("%w: %d %s, over the limit of %d", ErrProtocol, n, what, limit)
	}
	return int(n), nil
}

// vector reads a length and that many bytes, the length at most limit.
func (t *tsReader) vector(what string, limit int) ([]byte, error) {
	n, err := t.count(what+" bytes", limit)
	if err != nil {
		return nil, err
	}
	var b []byte
	for len(b) < n || b == nil {
		m := min(n-len(b), readChunk)
		if b == nil || len(b)+m > cap(b) {
			size := min(n, max(2*cap(b), len(b)+m))
			if err := t.reserve(allocSize(size) - allocSize(cap(b))); err != nil {
				return nil, fmt.Errorf("reading a %s of %d bytes: %w", what, n, err)
			}
			grown := make([]byte, len(b), size)
			copy(grown, b)
			b = grown
		}
		b = b[:len(b)+m]
		if _, err := io.ReadFull(t.r, b[len(b)-m:]); err != nil {
			return nil, fmt.Errorf("%w: %s cut short: %w", ErrProtocol, what, err)
		}
	}
	return b, nil
}

// peekKey reads a key's length and looks at its bytes in the reader's buffer (which
// holds more than the longest key): it returns the key, 1 to MaxKeyLen bytes after the
// optional "/", and n, the bytes to Discard once the key has been used.
func (t *tsReader) peekKey() (key []byte, n int, err error) {
	if n, err = t.count("key bytes", MaxKeyLen+1); err != nil {
		return nil, 0, err
	}
	b, err := t.r.Peek(n)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, 0, fmt.Errorf("%w: key cut short: %w", ErrProtocol, err)
	}
	key = b
	if len(key) > 0 && key[0] == '/' {
		key = key[1:]
	}
	if len(key) == 0 || len(key) > MaxKeyLen {
		return nil, 0, fmt.Errorf("%w: key %q (want 1..%d bytes after the leading /)", ErrProtocol, b, MaxKeyLen)
	}
	return key, n, nil
}

// key reads a key; it costs one allocation, its string, and no buffer of its own.
func (t *tsReader) key() (string, error) {
	b, n, err := t.peekKey()
	if err != nil {
		return "", err
	}
	k := string(b)
	_, _ = t.r.Discard(n) // n bytes are buffered: Discard cannot fail
	return k, nil
}

// keyList reads n keys into one buffer, which grows, charged, as they arrive. The
// list is valid until the next call: a few short keys are read into buffers that the
// next query reuses, and more into a list from the server's free list (bufs), which
// the caller gives back (bufs.putList) once the query is answered.
func (t *tsReader) keyList(n int) (keyList, error) {
	var l keyList
	charged := 0 // the capacity of l.buf charged
	if n <= spareKeys {
		if t.spare.ends == nil {
			t.spare = bufs.spareKeys()
		}
		l = keyList{buf: t.spare.buf[:0], ends: t.spare.ends[:0]}
	} else {
		l = bufs.keyList()
		if cap(l.ends) < n {
			l.ends = nil
		}
		if err := t.reserve(allocSize(8*max(n, cap(l.ends))) + allocSize(cap(l.buf))); err != nil {
			return keyList{}, fmt.Errorf("reading %d keys: %w", n, err)
		}
		charged = cap(l.buf)
		if l.ends == nil {
			l.ends = make([]int, 0, n)
		}
	}
	for range n {
		k, m, err := t.peekKey()
		if err != nil {
			return l, err
		}
		if len(l.buf)+len(k) > cap(l.buf) {
			size := max(2*cap(l.buf), len(l.buf)+len(k), 64)
			if err := t.reserve(allocSize(size) - allocSize(charged)); err != nil {
				return l, fmt.Errorf("reading %d keys: %w", n, err)
			}
			l.buf = append(make([]byte, 0, size), l.buf...)
			charged = size
		}
		l.buf = append(l.buf, k...)
		l.ends = append(l.ends, len(l.buf))
		_, _ = t.r.Discard(m)
	}
	return l, nil
}

// tsWriter builds the protocol's requests and replies.
type tsWriter struct{ b []byte }

func (w *tsWriter) u8(v byte)    { w.b = append(w.b, v) }
func (w *tsWriter) u32(v uint32) { w.b = binary.LittleEndian.AppendUint32(w.b, v) }
func (w *tsWriter) u64(v uint64) { w.b = binary.LittleEndian.AppendUint64(w.b, v) }
func (w *tsWriter) i64(v int64)  { w.u64(uint64(v)) }
func (w *tsWriter) str(s string) { w.u64(uint64(len(s))); w.b = append(w.b, s...) }
func (w *tsWriter) vec(p []byte) { w.u64(uint64(len(p))); w.b = append(w.b, p...) }

// prefixed writes the string prefix+s without building it.
func (w *tsWriter) prefixed(prefix, s string) {
	w.u64(uint64(len(prefix) + len(s)))
	w.b = append(append(w.b, prefix...), s...)
}
func (w *tsWriter) reset()        { w.b = w.b[:0] }
func (w *tsWriter) bytes() []byte { return w.b }
