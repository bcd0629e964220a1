package rendezvous

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Limits of the wire protocol. Both sides check them before allocating anything.
const (
	// MaxKeyLen is the longest key, in bytes. Keys are never empty.
	MaxKeyLen = 1024
	// MaxValueLen is the largest value, in bytes.
	MaxValueLen = 1 << 20
	// MaxKeysPerRequest is the most keys one Wait or Check may name.
	MaxKeysPerRequest = 4096
	// MaxFrameLen is the largest frame body (everything after the 4-byte length).
	MaxFrameLen = MaxValueLen + 64<<10
	// maxHandshakeFrame bounds frames read before the handshake completes, so a client
	// that has not proved itself cannot make the server allocate more than this.
	maxHandshakeFrame = 256
	// frameHeaderLen is op, status, id and field count.
	frameHeaderLen = 1 + 1 + 4 + 2
	// readChunk is how much a large frame's buffer grows at a time: memory follows the
	// bytes that actually arrive, not the length a peer claims.
	readChunk = 64 << 10
)

// ProtocolVersion is the version of the wire protocol this package speaks.
const ProtocolVersion = 2

// magic opens every hello.
const magic = "ncclgo-rdzv"

type op uint8

const (
	opHello op = iota + 1
	opAuth
	opSet
	opGet
	opAdd
	opWait
	opCAS
	opDelete
	opCheck
	opCancel
	opPing
	opBarrier
	opBarrierState
	opArrive // latch.go
)

func (o op) String() string {
	names := [...]string{"", "hello", "auth", "set", "get", "add", "wait", "compare-and-set", "delete", "check", "cancel", "ping", "barrier", "barrier-state", "arrive"}
	if int(o) < len(names) && o != 0 {
		return names[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

type status uint8

const (
	statusOK status = iota
	statusFailed
	statusUnauthorized
	statusVersion
	statusBusy
	statusNotCounter
	statusStoreFull
	statusInvalid
)

// sentinel maps a reply status to the error a caller tests for.
func (s status) sentinel() error {
	switch s {
	case statusUnauthorized:
		return ErrUnauthorized
	case statusVersion:
		return ErrVersionMismatch
	case statusBusy:
		return ErrBusy
	case statusNotCounter:
		return ErrNotCounter
	case statusStoreFull:
		return ErrStoreFull
	case statusInvalid:
		return ErrInvalidArgument
	default:
		return ErrProtocol
	}
}

// frame is one decoded message. Its fields alias the buffer it was decoded from.
type frame struct {
	op     op
	status status
	id     uint32
	fields [][]byte
}

// readFrame reads one length-prefixed frame body into buf (reused when large enough)
// and returns the body and the buffer to reuse. A body over limit is refused before
// anything is allocated; a large body's buffer grows only as its bytes arrive. A clean
// end of stream before the first byte is io.EOF.
func readFrame(r io.Reader, buf []byte, limit int) (body, reuse []byte, err error) {
	var hdr [4]byte
	if n, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, buf, fmt.Errorf("%w: truncated frame: %d of 4 length bytes", ErrProtocol, n)
		}
		return nil, buf, err
	}
	size := binary.BigEndian.Uint32(hdr[:])
	switch {
	case uint64(size) > uint64(limit):
		return nil, buf, fmt.Errorf("%w: frame of %d bytes exceeds the limit of %d", ErrProtocol, size, limit)
	case size < frameHeaderLen:
		return nil, buf, fmt.Errorf("%w: frame of %d bytes is shorter than its %d-byte header", ErrProtocol, size, frameHeaderLen)
	}
	n := int(size)
	if cap(buf) >= n {
		body = buf[:n]
		if got, err := io.ReadFull(r, body); err != nil {
			return nil, buf, truncated(err, got, n)
		}
		return body, buf, nil
	}
	body = buf[:0]
	for len(body) < n {
		chunk := min(n-len(body), readChunk)
		if cap(body)-len(body) < chunk {
			grown := make([]byte, len(body), min(n, max(2*cap(body), len(body)+chunk)))
			copy(grown, body)
			body = grown
		}
		got, err := io.ReadFull(r, body[len(body):len(body)+chunk])
		if err != nil {
			return nil, buf, truncated(err, len(body)+got, n)
		}
		body = body[:len(body)+chunk]
	}
	return body, body, nil
}

func truncated(err error, got, want int) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated frame: %d of %d bytes", ErrProtocol, got, want)
	}
	return fmt.Errorf("reading frame of %d bytes (%d arrived): %w", want, got, err)
}

// decodeFrame parses a frame body. Field slices alias body; fields is reused for the
// field list when it is large enough.
func decodeFrame(body []byte, fields [][]byte) (frame, error) {
	if len(body) < frameHeaderLen {
		return frame{}, fmt.Errorf("%w: frame of %d bytes is shorter than its %d-byte header", ErrProtocol, len(body), frameHeaderLen)
	}
	f := frame{
		op:     op(body[0]),
		status: status(body[1]),
		id:     binary.BigEndian.Uint32(body[2:6]),
	}
	count := int(binary.BigEndian.Uint16(body[6:8]))
	rest := body[frameHeaderLen:]
	switch {
	case count > MaxKeysPerRequest+1:
		return frame{}, fmt.Errorf("%w: %d fields exceed the limit of %d", ErrProtocol, count, MaxKeysPerRequest+1)
	case count*4 > len(rest):
		return frame{}, fmt.Errorf("%w: %d fields cannot fit in %d bytes", ErrProtocol, count, len(rest))
	}
	if cap(fields) >= count {
		fields = fields[:0]
	} else {
		fields = make([][]byte, 0, count)
	}
	for i := range count {
		if len(rest) < 4 {
			return frame{}, fmt.Errorf("%w: field %d: length cut off", ErrProtocol, i)
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		switch {
		case n > MaxValueLen:
			return frame{}, fmt.Errorf("%w: field %d of %d bytes exceeds the limit of %d", ErrProtocol, i, n, MaxValueLen)
		case uint64(n) > uint64(len(rest)):
			return frame{}, fmt.Errorf("%w: field %d of %d bytes overruns the frame by %d", ErrProtocol, i, n, int(n)-len(rest))
		}
		fields = append(fields, rest[:n:n])
		rest = rest[n:]
	}
	if len(rest) != 0 {
		return frame{}, fmt.Errorf("%w: %d bytes after the last field", ErrProtocol, len(rest))
	}
	f.fields = fields
	return f, nil
}

// encoder builds one frame in a reusable buffer.
type encoder struct {
	b     []byte
	count int
}

func (e *encoder) begin(o op, s status, id uint32) {
	e.b = append(e.b[:0], 0, 0, 0, 0, byte(o), byte(s), 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(e.b[6:10], id)
	e.count = 0
}

func (e *encoder) bytes(p []byte) {
	e.b = binary.BigEndian.AppendUint32(e.b, uint32(len(p)))
	e.b = append(e.b, p...)
	e.count++
}

func (e *encoder) string(s string) {
	e.b = binary.BigEndian.AppendUint32(e.b, uint32(len(s)))
	e.b = append(e.b, s...)
	e.count++
}

func (e *encoder) uint64(v uint64) {
	e.b = binary.BigEndian.AppendUint32(e.b, 8)
	e.b = binary.BigEndian.AppendUint64(e.b, v)
	e.count++
}

// finish patches the length and field count and returns the whole frame, or an error
// when the frame breaks a limit (checked here so that the peer never has to).
func (e *encoder) finish() ([]byte, error) {
	body := len(e.b) - 4
	if body > MaxFrameLen {
		return nil, fmt.Errorf("%w: request of %d bytes exceeds the frame limit of %d", ErrInvalidArgument, body, MaxFrameLen)
	}
	if e.count > MaxKeysPerRequest+1 {
		return nil, fmt.Errorf("%w: %d fields exceed the limit of %d", ErrInvalidArgument, e.count, MaxKeysPerRequest+1)
	}
	binary.BigEndian.PutUint32(e.b[0:4], uint32(body))
	binary.BigEndian.PutUint16(e.b[10:12], uint16(e.count))
	return e.b, nil
}

// checkKey validates a key against the protocol's limits.
func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidArgument)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key of %d bytes exceeds the limit of %d", ErrInvalidArgument, len(key), MaxKeyLen)
	}
	return nil
}

func checkValue(value []byte) error {
	if len(value) > MaxValueLen {
		return fmt.Errorf("%w: value of %d bytes exceeds the limit of %d", ErrInvalidArgument, len(value), MaxValueLen)
	}
	return nil
}
