package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/rendezvous"
	"github.com/ncclgo/ncclgo/internal/testenv"
)

const toolChildEnv = "NCCLGO_RDZV_TOOL_CHILD"

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunServesUntilItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, "tok", io.Discard, logs, ready) }()
	addr := (<-ready).String()

	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	_, err := rendezvous.Dial(cctx, addr)
	require.ErrorIs(t, err, rendezvous.ErrUnauthorized, "the token is enforced")
	c, err := rendezvous.Dial(cctx, addr, rendezvous.WithToken("tok"))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Set(cctx, "k", []byte("v")))
	v, err := c.Get(cctx, "k")
	require.NoError(t, err)
	assert.Equal(t, []byte("v"), v)

	cancel()
	require.NoError(t, <-done)
	_, err = c.Get(cctx, "k")
	require.ErrorIs(t, err, rendezvous.ErrClosed, "stopping closes the connections")
	assert.Contains(t, logs.String(), "rendezvous server listening")
	assert.Contains(t, logs.String(), "rendezvous: stopped")
}

// -world sizes the connection and handshake slots for its ranks, never under the
// defaults, and a limit given explicitly wins; the server reports what it serves with.
func TestWorldSizesConnectionSlots(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "max_conns=1024 max_handshakes=64 max_host_conns=0"},
		{[]string{"-max-host-conns", "16"}, "max_host_conns=16"},
		{[]string{"-world", "8"}, "max_conns=1024 max_handshakes=64"},
		{[]string{"-world", "4096"}, "max_conns=8192 max_handshakes=4096"},
		{[]string{"-world", "4096", "-max-handshakes", "100", "-max-conns", "5000"}, "max_conns=5000 max_handshakes=100"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			logs := &syncBuffer{}
			ready := make(chan net.Addr, 1)
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, tt.args...), "tok", io.Discard, logs, ready)
			}()
			<-ready
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(logs.String(), "rendezvous server listening") {
				require.True(t, time.Now().Before(deadline), "server did not start: %s", logs.String())
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			require.NoError(t, <-done)
			assert.Contains(t, logs.String(), tt.want)
		})
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-log-level", "loud"}, `-log-level "loud"`},
		{[]string{"-addr", "127.0.0.1:0", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"-addr", "256.0.0.1:1"}, `listen on "256.0.0.1:1"`},
		{[]string{"-no-such-flag"}, "flag provided but not defined"},
		{[]string{"-tls-cert", "c.pem"}, "-tls-cert and -tls-key go together"},
		{[]string{"-world", "-3"}, "-world -3: want the number of ranks"},
		{[]string{"-tls-cert", "/nonexistent/c.pem", "-tls-key", "/nonexistent/k.pem"}, `-tls-cert "/nonexistent/c.pem"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), tt.args, "", io.Discard, &stderr, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error()+stderr.String(), tt.want)
		})
	}
	var stderr bytes.Buffer
	require.ErrorIs(t, run(context.Background(), []string{"-h"}, "", io.Discard, &stderr, nil), flag.ErrHelp)
	assert.Contains(t, stderr.String(), "-addr")
}

func TestNewTokenPrintsAFreshHighEntropyToken(t *testing.T) {
	var out1, out2 bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-new-token"}, "", &out1, io.Discard, nil))
	require.NoError(t, run(context.Background(), []string{"-new-token"}, "", &out2, io.Discard, nil))
	t1, t2 := strings.TrimSpace(out1.String()), strings.TrimSpace(out2.String())
	assert.Len(t, t1, 43, "256 bits in unpadded base64url")
	assert.NotEqual(t, t1, t2)
	assert.NotContains(t, t1, "=")
}

// The built command stops cleanly on SIGTERM.
func TestCommandStopsOnSIGTERM(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "--", "-addr", "127.0.0.1:0")
	cmd.Env = append(testenv.Environ(), toolChildEnv+"=1", rendezvous.EnvToken+"=tok")
	logs := &syncBuffer{}
	cmd.Stderr = logs
	require.NoError(t, cmd.Start())
	deadline := time.Now().Add(time.Minute) // a -race binary starting on a loaded machine
	for !strings.Contains(logs.String(), "rendezvous server listening") {
		require.True(t, time.Now().Before(deadline), "server did not start: %s", logs.String())
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), logs.String())
	assert.Contains(t, logs.String(), "rendezvous: stopped")
}

// TestMain runs the command itself when TestCommandStopsOnSIGTERM starts the test
// binary as a child.
func TestMain(m *testing.M) {
	if os.Getenv(toolChildEnv) == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"rendezvous"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// -max-torch-value-bytes raises the longest value a PyTorch TCPStore client may store;
// over the default the connection is closed with a warning that names the flag.
func TestMaxTorchValueBytes(t *testing.T) {
	const size = 3 << 20
	for _, tt := range []struct {
		args   []string
		stored bool
	}{
		{nil, false},
		{[]string{"-max-torch-value-bytes", "4194304"}, true},
	} {
		t.Run(strings.Join(append([]string{"flags"}, tt.args...), " "), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			logs := &syncBuffer{}
			ready := make(chan net.Addr, 1)
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, tt.args...), "", io.Discard, logs, ready)
			}()
			addr := (<-ready).String()
			nc, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer nc.Close()
			// torch 2.x: VALIDATE, SET "/big" of size bytes, GETNUMKEYS.
			req := []byte{0, 0xCE, 0xF7, 0x85, 0x3C, 1}
			req = binary.LittleEndian.AppendUint64(req, 4)
			req = append(req, "/big"...)
			req = binary.LittleEndian.AppendUint64(req, size)
			req = append(req, make([]byte, size)...)
			req = append(req, 7)
			_, _ = nc.Write(req) // refused: the server may close before reading it all
			_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
			n := make([]byte, 8)
			_, err = io.ReadFull(nc, n)
			if tt.stored {
				require.NoError(t, err)
				assert.EqualValues(t, 1, binary.LittleEndian.Uint64(n), "keys after the SET")
			} else {
				require.Error(t, err, "a value over the default limit was accepted")
				deadline := time.Now().Add(30 * time.Second)
				for !strings.Contains(logs.String(), "-max-torch-value-bytes") {
					require.True(t, time.Now().Before(deadline), "no warning naming the flag: %s", logs.String())
					time.Sleep(10 * time.Millisecond)
				}
				assert.Contains(t, logs.String(), "limit=1048576")
			}
			cancel()
			require.NoError(t, <-done)
		})
	}
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"-max-torch-value-bytes", "0"}, "", io.Discard, &stderr, nil)
	require.ErrorContains(t, err, "-max-torch-value-bytes 0: want at least 1")
}
