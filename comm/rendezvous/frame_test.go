package rendezvous

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// frameBytes builds a frame by hand, independent of the encoder.
func frameBytes(o op, st status, id uint32, fields ...[]byte) []byte {
	var body []byte
	body = append(body, byte(o), byte(st))
	body = binary.BigEndian.AppendUint32(body, id)
	body = binary.BigEndian.AppendUint16(body, uint16(len(fields)))
	for _, f := range fields {
		body = binary.BigEndian.AppendUint32(body, uint32(len(f)))
		body = append(body, f...)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

func TestEncoderMatchesTheDocumentedLayout(t *testing.T) {
	var e encoder
	e.begin(opSet, statusOK, 0x01020304)
	e.string("key")
	e.bytes([]byte{9, 8})
	got, err := e.finish()
	require.NoError(t, err)
	want := []byte{
		0, 0, 0, 21, // length of the rest
		3, 0, // op set, status ok
		1, 2, 3, 4, // id
		0, 2, // two fields
		0, 0, 0, 3, 'k', 'e', 'y',
		0, 0, 0, 2, 9, 8,
	}
	assert.Equal(t, want, got)
	assert.Equal(t, want, frameBytes(opSet, statusOK, 0x01020304, []byte("key"), []byte{9, 8}))
}

func TestDecodeFrameRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		fields [][]byte
	}{
		{"no fields", nil},
		{"empty field", [][]byte{{}}},
		{"key and value", [][]byte{[]byte("ncclgo/g/gen/0/uid"), bytes.Repeat([]byte{7}, 128)}},
		{"largest value", [][]byte{[]byte("k"), make([]byte, MaxValueLen)}},
		{"most keys", bytes.SplitAfter(bytes.Repeat([]byte("k"), MaxKeysPerRequest), []byte("k"))[:MaxKeysPerRequest]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wire := frameBytes(opWait, statusNotCounter, 77, tt.fields...)
			body, _, err := readFrame(bufio.NewReader(bytes.NewReader(wire)), nil, MaxFrameLen)
			require.NoError(t, err)
			f, err := decodeFrame(body, nil)
			require.NoError(t, err)
			assert.Equal(t, opWait, f.op)
			assert.Equal(t, statusNotCounter, f.status)
			assert.Equal(t, uint32(77), f.id)
			require.Len(t, f.fields, len(tt.fields))
			for i := range tt.fields {
				assert.Equal(t, len(tt.fields[i]), len(f.fields[i]))
				assert.True(t, bytes.Equal(tt.fields[i], f.fields[i]), "field %d", i)
			}
		})
	}
}

func TestReadFrameRefusesBadFramesWithReasons(t *testing.T) {
	header := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	tests := []struct {
		name  string
		wire  []byte
		limit int
		want  string
	}{
		{"4 GiB length prefix", header(0xFFFFFFFF), MaxFrameLen, "frame of 4294967295 bytes exceeds the limit of 1114112"},
		{"one byte over the limit", header(MaxFrameLen + 1), MaxFrameLen, "exceeds the limit"},
		{"over the handshake limit", header(maxHandshakeFrame + 1), maxHandshakeFrame, "frame of 257 bytes exceeds the limit of 256"},
		{"http request as garbage", []byte("GET / HTTP/1.1\r\n\r\n"), maxHandshakeFrame, "frame of 1195725856 bytes exceeds the limit of 256"},
		{"shorter than the header", header(3), MaxFrameLen, "frame of 3 bytes is shorter than its 8-byte header"},
		{"truncated length", []byte{0, 0}, MaxFrameLen, "truncated frame: 2 of 4 length bytes"},
		{"truncated body", append(header(100), make([]byte, 40)...), MaxFrameLen, "truncated frame: 40 of 100 bytes"},
		{"truncated large body", append(header(MaxFrameLen), make([]byte, 70000)...), MaxFrameLen, "truncated frame: 70000 of 1114112 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, buf, err := readFrame(bytes.NewReader(tt.wire), nil, tt.limit)
			require.ErrorIs(t, err, ErrProtocol)
			assert.Contains(t, err.Error(), tt.want)
			assert.LessOrEqual(t, cap(buf), 2*len(tt.wire)+readChunk, "buffer grew beyond the bytes that arrived")
		})
	}
	t.Run("clean end of stream", func(t *testing.T) {
		_, _, err := readFrame(bytes.NewReader(nil), nil, MaxFrameLen)
		assert.Equal(t, io.EOF, err)
	})
}

func TestReadFrameAllocatesOnlyWhatArrives(t *testing.T) {
	// A peer claims a maximal frame and sends 1 KiB: the reader must not reserve the
	// claimed size up front.
	wire := append(binary.BigEndian.AppendUint32(nil, MaxFrameLen), make([]byte, 1024)...)
	const runs = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		_, buf, err := readFrame(bytes.NewReader(wire), nil, MaxFrameLen)
		require.ErrorIs(t, err, ErrProtocol)
		require.LessOrEqual(t, cap(buf), readChunk)
	}
	runtime.ReadMemStats(&after)
	perRun := (after.TotalAlloc - before.TotalAlloc) / runs
	assert.Less(t, perRun, uint64(2*readChunk), "bytes allocated per truncated maximal frame")
}

func TestDecodeFrameRefusesMalformedBodies(t *testing.T) {
	hdr := func(count uint16) []byte {
		b := []byte{byte(opSet), 0, 0, 0, 0, 1}
		return binary.BigEndian.AppendUint16(b, count)
	}
	field := func(n uint32, data ...byte) []byte { return append(binary.BigEndian.AppendUint32(nil, n), data...) }
	tests := []struct {
		name string
		body []byte
		want string
	}{
		{"short header", []byte{1, 2, 3}, "shorter than its 8-byte header"},
		{"too many fields", hdr(MaxKeysPerRequest + 2), "4098 fields exceed the limit of 4097"},
		{"fields cannot fit", hdr(3), "3 fields cannot fit in 0 bytes"},
		{"field overruns", append(hdr(1), field(10, 1, 2)...), "field 0 of 10 bytes overruns the frame by 8"},
		{"field over the value limit", append(hdr(1), field(MaxValueLen+1)...), "exceeds the limit of 1048576"},
		{"length cut off", append(append(hdr(2), field(3, 'a', 'b', 'c')...), 0, 0), "field 1: length cut off"},
		{"trailing bytes", append(append(hdr(1), field(1, 'k')...), 0xAA), "1 bytes after the last field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeFrame(tt.body, nil)
			require.ErrorIs(t, err, ErrProtocol)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestEncoderRefusesFramesOverTheLimit(t *testing.T) {
	var e encoder
	e.begin(opSet, statusOK, 1)
	e.string("k")
	e.bytes(make([]byte, MaxFrameLen))
	_, err := e.finish()
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.Contains(t, err.Error(), "exceeds the frame limit of 1114112")
}

// FuzzDecodeFrame feeds arbitrary bytes to the frame reader and decoder. Whatever
// arrives, they must not panic, must not grow a buffer beyond what arrived, and a frame
// they accept must encode back to the same bytes with every field within its limit.
// Seeds live in testdata/fuzz/FuzzDecodeFrame and run in plain go test.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(frameBytes(opHello, statusOK, 0, []byte(magic), []byte{0, 1}, make([]byte, nonceLen)))
	f.Add(frameBytes(opGet, statusOK, 1, []byte("ncclgo/g/gen/0/uid")))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, limit := range []int{maxHandshakeFrame, MaxFrameLen} {
			body, buf, err := readFrame(bufio.NewReader(bytes.NewReader(data)), nil, limit)
			if cap(buf) > 2*len(data)+readChunk {
				t.Fatalf("buffer of %d bytes for %d bytes of input", cap(buf), len(data))
			}
			if err != nil {
				continue
			}
			require.LessOrEqual(t, len(body), limit)
			fr, err := decodeFrame(body, nil)
			if err != nil {
				continue
			}
			require.LessOrEqual(t, len(fr.fields), MaxKeysPerRequest+1)
			var e encoder
			e.begin(fr.op, fr.status, fr.id)
			for _, fd := range fr.fields {
				require.LessOrEqual(t, len(fd), MaxValueLen)
				e.bytes(fd)
			}
			again, err := e.finish()
			require.NoError(t, err)
			require.Equal(t, data[:4+len(body)], again)
		}
	})
}
