package rendezvous

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/torchtest"
	"github.com/ncclgo/ncclgo/internal/testenv"
)

// pyOutput runs a torch script and returns its combined output, failing the test
// with it when the script fails.
func pyRun(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(cmd.Args, " "), err, out, testenv.FailureExcerpt(string(out)))
	}
	return string(out)
}

// Python's torch.distributed.TCPStore, of both generations, against ncclgo's server:
// every operation a torch client has, and keys shared with ncclgo's own clients.
func TestTorchClientAgainstServer(t *testing.T) {
	for _, name := range torchtest.Names() {
		t.Run(name, func(t *testing.T) {
			env := torchtest.Require(t, name)
			dir := torchtest.Stage(t, filepath.Join("testdata", "torch", "store.py"))
			_, addr := startServer(t)
			host, port, _ := strings.Cut(addr, ":")
			ctx := ctxTimeout(t, 3*time.Minute)
			c := dial(t, addr)
			require.NoError(t, c.Set(ctx, "from-go", []byte("hello from go")))
			late := make(chan error, 1)
			go func() {
				// The torch client waits for go/late once it has set py/waiting.
				if _, err := c.Get(ctx, "py/waiting"); err != nil {
					late <- err
					return
				}
				late <- c.Set(ctx, "go/late", []byte("late"))
			}()
			args := []string{filepath.Join(dir, "store.py"), "client", host, port}
			if env.Major() == 2 {
				args = append(args, "timeout") // CANCEL_WAIT exists in generation 2 only
			}
			out := pyRun(t, env.Command(ctx, args...))
			require.Contains(t, out, "OK")
			require.NoError(t, <-late)
			v, err := c.Get(ctx, "py/a")
			require.NoError(t, err)
			require.Equal(t, "1", string(v))
			v, err = c.Get(ctx, "py/n")
			require.NoError(t, err)
			require.Equal(t, "7", string(v))
			v, err = c.Get(ctx, "/worker/attempt_0/pk")
			require.NoError(t, err)
			require.Equal(t, "prefixed", string(v))
			present, err := c.Check(ctx, "py/c")
			require.NoError(t, err)
			require.Equal(t, []bool{false}, present)
		})
	}
}

// With a token, the server refuses torch clients unless WithTorchClients(true).
func TestTorchClientRefusedWithToken(t *testing.T) {
	env := torchtest.Require(t, torchtest.Torch1)
	dir := torchtest.Stage(t, filepath.Join("testdata", "torch", "store.py"))
	logs := &logBuffer{}
	_, addr := startServer(t, WithToken("secret"), WithLogger(logs.logger()))
	host, port, _ := strings.Cut(addr, ":")
	ctx := ctxTimeout(t, 3*time.Minute)
	out, err := env.Command(ctx, filepath.Join(dir, "store.py"), "client", host, port).CombinedOutput()
	require.Error(t, err, "a torch client got through a token-protected store:\n%s", out)
	require.Contains(t, logs.String(), "refusing a PyTorch TCPStore client")

	_, addr = startServer(t, WithToken("secret"), WithTorchClients(true))
	host, port, _ = strings.Cut(addr, ":")
	c := dial(t, addr, WithToken("secret"))
	require.NoError(t, c.Set(ctx, "from-go", []byte("hello from go")))
	go func() {
		if _, err := c.Get(ctx, "py/waiting"); err == nil {
			_ = c.Set(ctx, "go/late", []byte("late"))
		}
	}()
	require.Contains(t, pyRun(t, env.Command(ctx, filepath.Join(dir, "store.py"), "client", host, port)), "OK")
}

// ncclgo's TCPStoreClient against torch's own C++ server, both generations.
func TestTCPStoreClientAgainstTorch(t *testing.T) {
	for _, name := range torchtest.Names() {
		t.Run(name, func(t *testing.T) {
			env := torchtest.Require(t, name)
			dir := torchtest.Stage(t, filepath.Join("testdata", "torch", "store.py"))
			ctx := ctxTimeout(t, 3*time.Minute)
			cmd := env.Command(ctx, filepath.Join(dir, "store.py"), "server")
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			sc := bufio.NewScanner(stdout)
			var port int
			for sc.Scan() {
				if p, ok := strings.CutPrefix(sc.Text(), "PORT "); ok {
					port, err = strconv.Atoi(p)
					require.NoError(t, err)
					break
				}
			}
			require.NotZero(t, port, "torch server printed no port: %s", stderr.String())
			addr := "127.0.0.1:" + strconv.Itoa(port)
			c, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()))
			require.NoError(t, err)
			defer c.Close()
			require.Equal(t, TorchProtocol(env.Major()), c.Protocol(), "detected protocol")

			v, err := c.Get(ctx, "from-py")
			require.NoError(t, err)
			require.Equal(t, "hello from python", string(v))
			require.NoError(t, c.Set(ctx, "go/x", []byte("gx")))
			n, err := c.Add(ctx, "go/n", 5)
			require.NoError(t, err)
			require.EqualValues(t, 5, n)
			n, err = c.Add(ctx, "go/n", 7)
			require.NoError(t, err)
			require.EqualValues(t, 12, n)
			// A WAIT registered before a CompareAndSet creates its key is answered
			// (torch's server wakes no one on a COMPARE_SET: the client follows it with a
			// query that does). A raw connection sends the WAIT and then a CHECK of a
			// missing key: torch answers them in order, so the CHECK's answer (1) says
			// the WAIT is registered.
			raw, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer raw.Close()
			var w tsWriter
			gen := TorchProtocol(env.Major())
			if gen == TorchProtocol2 {
				w.u8(byte(tsValidate))
				w.u32(tsMagic)
			}
			for _, q := range []tsQuery{tsWait, tsCheck} {
				b, _ := tsWire(gen, q)
				w.u8(b)
				w.u64(1)
				w.str(map[tsQuery]string{tsWait: "/go/c", tsCheck: "/go/absent"}[q])
			}
			_, err = raw.Write(w.bytes())
			require.NoError(t, err)
			answer := make([]byte, 1)
			_, err = io.ReadFull(raw, answer)
			require.NoError(t, err)
			require.Equal(t, byte(tsNotReady), answer[0], "CHECK of a missing key")
			cur, swapped, err := c.CompareAndSet(ctx, "go/c", nil, []byte("first"))
			require.NoError(t, err)
			require.True(t, swapped)
			require.Equal(t, "first", string(cur))
			// Only a missing wake-up waits here (the deadline is the failure's, not a
			// margin the answer needs).
			_ = raw.SetReadDeadline(time.Now().Add(time.Minute))
			_, err = io.ReadFull(raw, answer)
			require.NoError(t, err, "the WAIT registered before CompareAndSet created the key was never answered")
			require.Equal(t, byte(tsStopWaiting), answer[0])
			cur, swapped, err = c.CompareAndSet(ctx, "go/c", nil, []byte("first"))
			require.NoError(t, err)
			require.False(t, swapped, "create of an existing key")
			require.Equal(t, "first", string(cur))
			cur, swapped, err = c.CompareAndSet(ctx, "go/c", []byte("wrong"), []byte("second"))
			require.NoError(t, err)
			require.False(t, swapped)
			require.Equal(t, "first", string(cur))
			cur, swapped, err = c.CompareAndSet(ctx, "go/c", []byte("first"), []byte("second"))
			require.NoError(t, err)
			require.True(t, swapped)
			require.Equal(t, "second", string(cur))
			present, err := c.Check(ctx, "go/x", "go/absent", "from-py")
			require.NoError(t, err)
			require.Equal(t, []bool{true, false, true}, present)
			require.NoError(t, c.Set(ctx, "go/deleted", []byte("x")))
			ok, err := c.Delete(ctx, "go/deleted")
			require.NoError(t, err)
			require.True(t, ok)
			ok, err = c.Delete(ctx, "go/deleted")
			require.NoError(t, err)
			require.False(t, ok)

			// A wait whose context ends fails with the context's error, and the client
			// goes on working.
			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			err = c.Wait(short, "go/never")
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.NoError(t, c.Barrier(ctx, "go/barrier", 0, 1))
			// torch's server has no countdown latch: Arrive says so and changes nothing.
			served, err := c.ServesArrivals(ctx)
			require.NoError(t, err)
			require.False(t, served, "torch's server serves arrivals")
			_, err = c.Arrive(ctx, Arrival{Done: "go/l/done", Counter: "go/l/count", Target: 1})
			require.ErrorIs(t, err, errors.ErrUnsupported)
			present, err = c.Check(ctx, "go/l/done", "go/l/count")
			require.NoError(t, err)
			require.Equal(t, []bool{false, false}, present)

			p, err := DialTCPStore(ctx, addr, WithKeyPrefix("/worker/attempt_0"), WithLogger(discardLogger()))
			require.NoError(t, err)
			defer p.Close()
			v, err = p.Get(ctx, "pk")
			require.NoError(t, err)
			require.Equal(t, "prefixed", string(v))
			p1, err := DialTCPStore(ctx, addr, WithKeyPrefix("/worker/attempt_1"), WithLogger(discardLogger()))
			require.NoError(t, err)
			defer p1.Close()
			require.NoError(t, p1.Set(ctx, "gk", []byte("gv")))

			require.NoError(t, c.Set(ctx, "go/done", []byte("1")))
			for sc.Scan() {
				if sc.Text() == "OK" {
					return
				}
				t.Log(sc.Text())
			}
			_ = cmd.Wait()
			t.Fatalf("torch server did not confirm Go's keys: %s", stderr.String())
		})
	}
}

// startTorchServer runs torch's own C++ TCPStore server of env until the test ends
// and returns its address.
func startTorchServer(t *testing.T, ctx context.Context, env torchtest.Env) string {
	t.Helper()
	cmd := env.Command(ctx, "-c", `
import sys, torch.distributed as d
s = d.TCPStore("127.0.0.1", 0, world_size=1, is_master=True, wait_for_workers=False)
print("PORT", s.port, flush=True)
sys.stdin.read()
`)
	return servePy(t, cmd)
}

// servePy starts cmd, a torch server that prints "PORT <port>" and serves until its
// stdin closes, and returns its address; it is stopped when the test ends.
func servePy(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "PORT "); ok {
			return "127.0.0.1:" + p
		}
	}
	t.Fatalf("torch server printed no port: %s", stderr.String())
	return ""
}

// On torch 1's server a CompareAndSet that creates a key wakes its waiters with a SET
// of the value: one that another client changed meanwhile is left as that client made
// it, and the waiters are still woken when no one did.
func TestTCPStoreCompareAndSetWakeLeavesARacingChange(t *testing.T) {
	env := torchtest.Require(t, torchtest.Torch1)
	ctx := ctxTimeout(t, 3*time.Minute)
	addr := startTorchServer(t, ctx, env)
	c, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()))
	require.NoError(t, err)
	defer c.Close()
	other, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()))
	require.NoError(t, err)
	defer other.Close()
	require.Equal(t, TorchProtocol1, c.Protocol())

	for _, tc := range []struct{ name, mine, theirs string }{
		{"value", "mine", "theirs"},
		{"empty value", "", "theirs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "raced/" + tc.name
			c.afterSwap = func() { require.NoError(t, other.Set(ctx, key, []byte(tc.theirs))) }
			cur, swapped, err := c.CompareAndSet(ctx, key, nil, []byte(tc.mine))
			c.afterSwap = nil
			require.NoError(t, err)
			require.True(t, swapped)
			require.Equal(t, tc.mine, string(cur))
			v, err := other.Get(ctx, key)
			require.NoError(t, err)
			require.Equal(t, tc.theirs, string(v), "the change made after the swap was overwritten")

			// A Delete after the swap is not undone either.
			gone := "deleted/" + tc.name
			c.afterSwap = func() {
				ok, err := other.Delete(ctx, gone)
				require.NoError(t, err)
				require.True(t, ok)
			}
			_, swapped, err = c.CompareAndSet(ctx, gone, nil, []byte(tc.mine))
			c.afterSwap = nil
			require.NoError(t, err)
			require.True(t, swapped)
			present, err := other.Check(ctx, gone)
			require.NoError(t, err)
			require.Equal(t, []bool{false}, present, "the key deleted after the swap was created again")

			// Without a race, a WAIT sent before the key existed is woken. A raw
			// connection sends it with a CHECK of a missing key after it: torch answers
			// them in order, so the CHECK's answer says the WAIT is registered.
			fresh := "woken/" + tc.name
			raw, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer raw.Close()
			var w tsWriter
			for _, q := range []struct {
				q   tsQuery
				key string
			}{{tsWait, "/" + fresh}, {tsCheck, "/absent"}} {
				b, _ := tsWire(TorchProtocol1, q.q)
				w.u8(b)
				w.u64(1)
				w.str(q.key)
			}
			_, err = raw.Write(w.bytes())
			require.NoError(t, err)
			answer := make([]byte, 1)
			_, err = io.ReadFull(raw, answer)
			require.NoError(t, err)
			require.Equal(t, byte(tsNotReady), answer[0], "CHECK of a missing key")
			_, swapped, err = c.CompareAndSet(ctx, fresh, nil, []byte(tc.mine))
			require.NoError(t, err)
			require.True(t, swapped)
			// Only a missing wake-up waits here (the deadline is the failure's).
			_ = raw.SetReadDeadline(time.Now().Add(time.Minute))
			_, err = io.ReadFull(raw, answer)
			require.NoError(t, err, "the WAIT for the created key was never answered")
			require.Equal(t, byte(tsStopWaiting), answer[0])
		})
	}
}
