package rendezvous

import (
	"context"
	"encoding/binary"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memInUse is heap plus goroutine stacks after a collection.
func memInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// memBound is how much the process may grow while under abuse. A server that
// allocated what a 4 GiB length prefix claims, or a megabyte per connection, breaks it.
const memBound = 64 << 20

func TestServerSurvivesAbuse(t *testing.T) {
	noLeaks(t)
	const token = "s3cret"
	logs := &logBuffer{}
	s, addr := startServer(t,
		WithToken(token),
		WithLogger(logs.logger()),
		WithHandshakeTimeout(time.Second),
		WithIdleTimeout(600*time.Millisecond),
		WithMaxConns(64),
	)
	ctx := ctxTimeout(t, 30*time.Second)
	legit := dial(t, addr, WithToken(token))
	require.NoError(t, legit.Set(ctx, "uid", []byte("the unique id")))
	base := memInUse()

	// The legitimate client works throughout: a loop of round trips runs during every
	// abuse below, and checks after each.
	var stop atomic.Bool
	var failures atomic.Int64
	var rounds atomic.Int64
	var loop sync.WaitGroup
	loop.Go(func() {
		for !stop.Load() {
			if _, err := legit.Add(ctx, "ticks", 1); err != nil {
				failures.Add(1)
				t.Errorf("legitimate client failed during abuse: %v", err)
				return
			}
			rounds.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	})
	defer func() { stop.Store(true); loop.Wait() }()

	authed := func(t *testing.T) *rawConn {
		r := rawDial(t, addr)
		clientNonce, hello := r.hello(ProtocolVersion)
		r.send(opAuth, 0, proof(token, clientLabel, clientNonce, hello.fields[2]))
		f, err := r.recv()
		require.NoError(t, err)
		require.Equal(t, statusOK, f.status)
		return r
	}
	lenPrefix := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

	tests := []struct {
		name    string
		abuse   func(t *testing.T) *rawConn
		wantLog string
	}{
		{"garbage bytes", func(t *testing.T) *rawConn {
			r := rawDial(t, addr)
			_, _ = r.nc.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
			return r
		}, "frame of 1195725856 bytes exceeds the limit of 256"},
		{"4 GiB length prefix before the handshake", func(t *testing.T) *rawConn {
			r := rawDial(t, addr)
			_, _ = r.nc.Write(lenPrefix(0xFFFFFFFF))
			return r
		}, "frame of 4294967295 bytes exceeds the limit of 256"},
		{"4 GiB length prefix after authentication", func(t *testing.T) *rawConn {
			r := authed(t)
			_, _ = r.nc.Write(lenPrefix(0xFFFFFFFF))
			return r
		}, "frame of 4294967295 bytes exceeds the limit of 1114112"},
		{"truncated frame then end of stream", func(t *testing.T) *rawConn {
			r := authed(t)
			_, _ = r.nc.Write(append(lenPrefix(100), make([]byte, 10)...))
			_ = r.nc.(*net.TCPConn).CloseWrite()
			return r
		}, "truncated frame: 10 of 100 bytes"},
		{"large truncated frame that stalls", func(t *testing.T) *rawConn {
			r := authed(t)
			_, _ = r.nc.Write(append(lenPrefix(MaxFrameLen), make([]byte, 1000)...))
			return r
		}, "reading frame of 1114112 bytes (1000 arrived)"},
		{"a client that connects and says nothing", func(t *testing.T) *rawConn {
			return rawDial(t, addr)
		}, `stage=handshake err="reading hello`},
		{"an authenticated client that goes silent", func(t *testing.T) *rawConn {
			return authed(t)
		}, "closing silent connection"},
		{"an unknown op", func(t *testing.T) *rawConn {
			r := authed(t)
			r.send(op(200), 1)
			return r
		}, "unexpected op(200)"},
		{"a request with the wrong number of fields", func(t *testing.T) *rawConn {
			r := authed(t)
			r.send(opSet, 1, []byte("k"))
			return r
		}, "set with 1 fields"},
		{"a key over the limit", func(t *testing.T) *rawConn {
			r := authed(t)
			r.send(opSet, 1, make([]byte, MaxKeyLen+1), nil)
			return r
		}, "key of 1025 bytes (want 1..1024)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.abuse(t)
			assert.True(t, r.closedByPeer(), "the server closed the connection")
			eventually(t, "the reason is logged", func() bool { return contains(logs.String(), tt.wantLog) })
			v, err := legit.Get(ctx, "uid")
			require.NoError(t, err)
			assert.Equal(t, []byte("the unique id"), v)
		})
	}

	t.Run("1000 connections at once", func(t *testing.T) {
		const n = 1000
		conns := make([]net.Conn, n)
		var wg sync.WaitGroup
		var dialFailed atomic.Int64
		for i := range conns {
			wg.Go(func() {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					dialFailed.Add(1)
					return
				}
				if i%2 == 0 {
					_, _ = nc.Write([]byte("garbage that is not a frame at all"))
				}
				conns[i] = nc
			})
		}
		wg.Wait()
		defer func() {
			for _, nc := range conns {
				if nc != nil {
					_ = nc.Close()
				}
			}
		}()
		// Evicted connections leave as their goroutines notice; the limit then holds.
		// Silent ones past it wait in the lobby, without a slot or a goroutine.
		eventually(t, "the limit of connections in their handshake holds", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.conns)-s.lobbyN <= DefaultMaxHandshakes+1 && len(s.unauth) <= DefaultMaxHandshakes
		})
		grown := int64(memInUse()) - int64(base)
		t.Logf("memory while 1000 abusive connections are open: %+d bytes", grown)
		assert.Less(t, grown, int64(memBound))

		// A new legitimate client gets in at once: it takes the slot of a silent one.
		// Fresh silent connections hold every slot when it comes. On a loaded machine
		// slots can still free themselves first (a silent connection meets its
		// handshake timeout before the client is admitted), and then none needs to be
		// dropped: the client is tried again, up to three times, each with slots held
		// anew, until one had to be dropped for it.
		const dropped = "connection dropped to make room for a newer one"
		evicted := false
		for try := 1; try <= 3 && !evicted; try++ {
			before := strings.Count(logs.String(), dropped)
			for range DefaultMaxHandshakes {
				rawDial(t, addr)
			}
			eventually(t, "silent connections hold every handshake slot", func() bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				return len(s.unauth) >= DefaultMaxHandshakes
			})
			late, err := Dial(ctx, addr, WithToken(token))
			require.NoError(t, err)
			require.NoError(t, late.Set(ctx, "late", []byte("in")))
			require.NoError(t, late.Close())
			// The dropped connection's end is logged as its goroutine notices.
			for end := time.Now().Add(2 * time.Second); !evicted && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
				evicted = strings.Count(logs.String(), dropped) > before
			}
			if !evicted {
				t.Logf("try %d: the late client found a slot without dropping a connection (the silent ones met their handshake timeout first)", try)
			}
		}
		assert.True(t, evicted, "no silent connection was dropped for a late client in three tries")

		// Every abusive connection is refused or timed out.
		var closed atomic.Int64
		for _, nc := range conns {
			if nc == nil {
				continue
			}
			wg.Go(func() {
				r := &rawConn{t: t, nc: nc}
				if r.closedByPeer() {
					closed.Add(1)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int64(n)-dialFailed.Load(), closed.Load())
		eventually(t, "only the legitimate client stays connected", func() bool { return s.numConns() == 1 })
	})

	stop.Store(true)
	loop.Wait()
	assert.Zero(t, failures.Load())
	assert.Positive(t, rounds.Load())
	grown := int64(memInUse()) - int64(base)
	t.Logf("memory after the abuse: %+d bytes", grown)
	assert.Less(t, grown, int64(memBound))
	v, err := legit.Get(ctx, "uid")
	require.NoError(t, err)
	assert.Equal(t, []byte("the unique id"), v)
}

func TestPendingRequestsPerConnectionAreBounded(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	c := dial(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Each wait holds ~4 KiB of keys on the server; 4 MiB worth must be refused.
	keys := make([]string, 4)
	for i := range keys {
		keys[i] = string(make([]byte, MaxKeyLen-1)) + string(rune('a'+i))
	}
	var refused error
	errs := make(chan error, 2000)
	for i := range 2000 {
		k := append([]string{string(rune(i + 1000))}, keys...)
		go func() { errs <- c.Wait(ctx, k...) }()
	}
	deadline := time.After(20 * time.Second)
	for refused == nil {
		select {
		case err := <-errs:
			refused = err
		case <-deadline:
			t.Fatal("no wait was refused")
		}
	}
	require.ErrorIs(t, refused, ErrInvalidArgument)
	assert.Contains(t, refused.Error(), "over the limit of 4194304")
	cancel()
}
