package rendezvous

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAuthentication(t *testing.T) {
	noLeaks(t)
	tests := []struct {
		name        string
		serverToken string
		clientToken string
		wantErr     string // empty: the client works
	}{
		{"no token anywhere", "", "", ""},
		{"matching tokens", "s3cret", "s3cret", ""},
		{"client lacks the token", "s3cret", "", "the server requires a token and none is configured (set NCCLGO_TOKEN or use WithToken)"},
		{"client has a wrong token", "s3cret", "guess", "the server could not prove it knows the token"},
		{"server lacks the token", "", "s3cret", "a token is configured but the server does not authenticate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, addr := startServer(t, WithToken(tt.serverToken))
			ctx := ctxTimeout(t, 5*time.Second)
			c, err := Dial(ctx, addr, WithToken(tt.clientToken))
			if tt.wantErr != "" {
				require.ErrorIs(t, err, ErrUnauthorized)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.NotContains(t, err.Error(), "s3cret", "the token never appears in errors")
				return
			}
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.Set(ctx, "k", []byte("v")))
			v, err := c.Get(ctx, "k")
			require.NoError(t, err)
			assert.Equal(t, []byte("v"), v)
		})
	}
}

func TestServerRefusesRequestsBeforeAuthentication(t *testing.T) {
	noLeaks(t)
	logs := &logBuffer{}
	_, addr := startServer(t, WithToken("s3cret"), WithLogger(logs.logger()))
	ctx := ctxTimeout(t, 5*time.Second)
	legit := dial(t, addr, WithToken("s3cret"))

	t.Run("a request instead of the proof", func(t *testing.T) {
		r := rawDial(t, addr)
		_, hello := r.hello(ProtocolVersion)
		require.Equal(t, statusOK, hello.status)
		require.Len(t, hello.fields[2], nonceLen, "the server sends a challenge")
		r.send(opSet, 1, []byte("stolen"), []byte("x"))
		assert.True(t, r.closedByPeer())
		present, err := legit.Check(ctx, "stolen")
		require.NoError(t, err)
		assert.Equal(t, []bool{false}, present, "the key was not written")
	})
	t.Run("a wrong proof", func(t *testing.T) {
		r := rawDial(t, addr)
		clientNonce, hello := r.hello(ProtocolVersion)
		r.send(opAuth, 0, proof("guess", clientLabel, clientNonce, hello.fields[2]))
		f, err := r.recv()
		require.NoError(t, err)
		assert.Equal(t, statusUnauthorized, f.status)
		assert.ErrorIs(t, statusError(f.status, f.fields), ErrUnauthorized)
		assert.True(t, r.closedByPeer())
	})
	t.Run("a replayed server proof", func(t *testing.T) {
		r := rawDial(t, addr)
		_, hello := r.hello(ProtocolVersion)
		r.send(opAuth, 0, hello.fields[3])
		f, err := r.recv()
		require.NoError(t, err)
		assert.Equal(t, statusUnauthorized, f.status)
		assert.True(t, r.closedByPeer())
	})
	t.Run("the right proof", func(t *testing.T) {
		r := rawDial(t, addr)
		clientNonce, hello := r.hello(ProtocolVersion)
		require.True(t, validProof(hello.fields[3], "s3cret", serverLabel, clientNonce, hello.fields[2]), "the server proves the token")
		r.send(opAuth, 0, proof("s3cret", clientLabel, clientNonce, hello.fields[2]))
		f, err := r.recv()
		require.NoError(t, err)
		require.Equal(t, statusOK, f.status)
		r.send(opSet, 9, []byte("raw"), []byte("ok"))
		f, err = r.recv()
		require.NoError(t, err)
		assert.Equal(t, statusOK, f.status)
		assert.Equal(t, uint32(9), f.id)
	})
	eventually(t, "the refusals are logged", func() bool {
		return contains(logs.String(), "the client's proof does not match the token", "expected authentication, got set")
	})
	require.NoError(t, legit.Set(ctx, "after", nil), "the legitimate client kept working")
}

func TestVersionMismatchIsRefused(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	r := rawDial(t, addr)
	_, f := r.hello(ProtocolVersion + 1)
	require.Equal(t, statusVersion, f.status)
	err := statusError(f.status, f.fields)
	require.ErrorIs(t, err, ErrVersionMismatch)
	assert.Contains(t, err.Error(), fmt.Sprintf("server speaks protocol version %d, client %d", ProtocolVersion, ProtocolVersion+1))
	assert.True(t, r.closedByPeer())
}

func TestClientRefusesAServerWithAWrongVersion(t *testing.T) {
	noLeaks(t)
	// A fake server that answers every hello with version mismatch.
	l, err := netListen()
	require.NoError(t, err)
	defer l.Close()
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		_, _, _ = readFrame(nc, nil, maxHandshakeFrame)
		var e encoder
		e.begin(opHello, statusVersion, 0)
		e.string("server speaks protocol version 9, client 1")
		b, _ := e.finish()
		_, _ = nc.Write(b)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = Dial(ctx, l.Addr().String())
	require.ErrorIs(t, err, ErrVersionMismatch)
	assert.Contains(t, err.Error(), "version 9")
	// The fake answers only its first connection: a retry would wait for ctx to end.
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "no retries on a version mismatch")
	assert.NoError(t, ctx.Err(), "no retries on a version mismatch")
}

func TestHelloMustComeFirst(t *testing.T) {
	noLeaks(t)
	logs := &logBuffer{}
	_, addr := startServer(t, WithLogger(logs.logger()))
	tests := []struct {
		name   string
		fields [][]byte
		op     op
	}{
		{"a request first", [][]byte{[]byte("k"), nil}, opSet},
		{"wrong magic", [][]byte{[]byte("not-the-magic"), binary.BigEndian.AppendUint16(nil, 1), make([]byte, nonceLen)}, opHello},
		{"short nonce", [][]byte{[]byte(magic), binary.BigEndian.AppendUint16(nil, 1), make([]byte, 3)}, opHello},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rawDial(t, addr)
			r.send(tt.op, 0, tt.fields...)
			assert.True(t, r.closedByPeer())
		})
	}
	eventually(t, "the reasons are logged", func() bool {
		return contains(logs.String(), "expected a hello, got set with 2 fields", "expected a hello, got hello with 3 fields")
	})
}
