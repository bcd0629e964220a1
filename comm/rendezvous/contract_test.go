package rendezvous

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"math/big"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/nettest"
)

func TestBarrierCountsRanksNotArrivals(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	ctx := ctxTimeout(t, 20*time.Second)
	const world = 3
	key := GenerationKey("contract", 0, "barrier")

	errs := make(chan error, 3)
	first := dial(t, addr)
	go func() { errs <- first.Barrier(ctx, key, 0, world) }()
	eventually(t, "rank 0 waits", func() bool {
		m, err := first.missingRanks(ctx, key, world)
		return err == nil && len(m) == 2
	})
	// A second process claiming rank 0 is told so; it does not count.
	dup := dial(t, addr)
	err := dup.Barrier(ctx, key, 0, world)
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.Contains(t, err.Error(), "rank 0 already arrived and is waiting (duplicate rank)")
	go func() { errs <- dial(t, addr).Barrier(ctx, key, 1, world) }()
	eventually(t, "rank 1 waits", func() bool {
		m, err := first.missingRanks(ctx, key, world)
		return err == nil && len(m) == 1 && m[0] == 2
	})
	select {
	case err := <-errs:
		t.Fatalf("a rank passed the barrier before rank 2 arrived: %v", err)
	default:
	}
	// A rank that already arrived may not complete it either, from any connection.
	err = dup.Barrier(ctx, key, 1, world)
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.Contains(t, err.Error(), "rank 1 already arrived")
	require.NoError(t, dial(t, addr).Barrier(ctx, key, 2, world))
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
}

func TestBarrierRefusesRanksOutsideTheWorld(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	ctx := ctxTimeout(t, 10*time.Second)
	key := "b"
	c := dial(t, addr)
	go func() { _ = c.Barrier(ctx, key, 0, 3) }()
	eventually(t, "rank 0 waits", func() bool { return pendingOn(t, addr) })

	// The project's client checks its arguments; another client's requests are checked
	// by the server, which names the rank.
	r := rawDial(t, addr)
	r.hello(ProtocolVersion)
	u64 := func(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
	for i, tt := range []struct {
		rank, world int64
		want        string
	}{
		{7, 3, `barrier "b": rank 7 outside [0, 3)`},
		{-1, 3, `barrier "b": rank -1 outside [0, 3)`},
		{1, 4, `barrier "b": rank 1 arrived for a world of 4, the barrier is for 3`},
		{1 << 40, 3, "out of range"},
	} {
		r.send(opBarrier, uint32(i+1), []byte(key), u64(tt.rank), u64(tt.world))
		f, err := r.recv()
		require.NoError(t, err)
		assert.Equal(t, statusInvalid, f.status, tt.want)
		require.Len(t, f.fields, 1)
		assert.Contains(t, string(f.fields[0]), tt.want)
	}
	m, err := c.missingRanks(ctx, key, 3)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2}, m, "none of them counted")
}

func TestBarrierCannotBeForgedThroughKeys(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	ctx := ctxTimeout(t, 20*time.Second)
	key := GenerationKey("contract", 1, "barrier")
	forger := dial(t, addr)
	// What the old client-side barrier kept under its key.
	require.NoError(t, forger.Set(ctx, key+"/done", []byte{1}))
	require.NoError(t, forger.Set(ctx, key+"/count", []byte("1000")))
	require.NoError(t, forger.Set(ctx, key+"/rank/1", []byte{1}))
	require.NoError(t, forger.Set(ctx, key, []byte("x")))

	// The deadline passes once rank 0 waits at the barrier, however slow the machine.
	short, expire := nettest.ExpiringContext()
	lone := make(chan error, 1)
	alone := dial(t, addr)
	go func() { lone <- alone.Barrier(short, key, 0, 2) }()
	eventually(t, "rank 0 waits alone", func() bool {
		m, err := forger.missingRanks(ctx, key, 2)
		return err == nil && len(m) == 1
	})
	expire()
	err := <-lone
	var be *BarrierError
	require.True(t, errors.As(err, &be), "rank 0 alone does not pass: %v", err)
	assert.Equal(t, []int{1}, be.Missing)

	key2 := GenerationKey("contract", 2, "barrier")
	errs := make(chan error, 1)
	first := dial(t, addr)
	go func() { errs <- first.Barrier(ctx, key2, 0, 2) }()
	eventually(t, "rank 0 waits", func() bool {
		m, err := forger.missingRanks(ctx, key2, 2)
		return err == nil && len(m) == 1
	})
	_, err = forger.Add(ctx, key2+"/count", 1000)
	require.NoError(t, err)
	require.NoError(t, forger.Set(ctx, key2+"/done", []byte("x")))
	require.NoError(t, dial(t, addr).Barrier(ctx, key2, 1, 2), "the legitimate ranks pass whatever the keys hold")
	require.NoError(t, <-errs)
}

func TestFrozenStoreIsDeclaredDead(t *testing.T) {
	// A stopped process keeps its connections open and answers nothing, as a hung host.
	// Keepalives every 500 ms: the connection outlives a second's delay on a loaded
	// machine before the stop, and three of them are still less than minSilence.
	p := startServerProc(t, "", "-idle-timeout", "1500ms")
	ctx := ctxTimeout(t, 60*time.Second)
	c, err := Dial(ctx, p.addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Set(ctx, "k", nil))

	errs := make(chan error, 2)
	go func() { errs <- c.Barrier(context.Background(), "never", 0, 2) }() // no deadline at all
	go func() { _, err := c.Get(context.Background(), "never"); errs <- err }()
	eventually(t, "the calls are sent", func() bool { return c.numPending() == 2 })
	p.signal(syscall.SIGSTOP)
	start := time.Now()
	for range 2 {
		select {
		case err := <-errs:
			require.ErrorIs(t, err, ErrUnresponsive)
			require.ErrorIs(t, err, ErrClosed)
			assert.Contains(t, err.Error(), "the store at "+p.addr+" has been silent for ")
			assert.Contains(t, err.Error(), "is declared dead")
		case <-time.After(30 * time.Second):
			t.Fatal("a call to the frozen store was still blocked after 30 s")
		}
	}
	t.Logf("declared dead %v after SIGSTOP (bound: %v of silence)", time.Since(start).Round(time.Millisecond), c.silentAfter())
	assert.Equal(t, minSilence, c.silentAfter(), "three keepalives of 500 ms, at least minSilence")
}

func TestPanicInOneConnectionLeavesTheServerServing(t *testing.T) {
	noLeaks(t)
	logs := &logBuffer{}
	hook := serverOption(func(c *serverConfig) {
		c.onRequest = func(o op, fields [][]byte) {
			if o == opSet && string(fields[0]) == "boom" {
				panic("injected panic")
			}
		}
	})
	s, addr := startServer(t, WithLogger(logs.logger()), hook)
	ctx := ctxTimeout(t, 10*time.Second)
	other := dial(t, addr)
	require.NoError(t, other.Set(ctx, "before", []byte("1")))
	waiting := make(chan error, 1)
	go func() { _, err := other.Get(ctx, "after"); waiting <- err }()

	victim := dial(t, addr)
	err := victim.Set(ctx, "boom", nil)
	require.ErrorIs(t, err, ErrClosed, "the panicking connection is closed")
	eventually(t, "the panic is logged with its stack", func() bool {
		return contains(logs.String(), "panic while serving a connection", "injected panic", "goroutine ", "server.go")
	})
	// Everyone else goes on: the same keys, blocked requests, new connections.
	late := dial(t, addr)
	v, err := late.Get(ctx, "before")
	require.NoError(t, err)
	assert.Equal(t, []byte("1"), v)
	require.NoError(t, late.Set(ctx, "after", []byte("2")))
	require.NoError(t, <-waiting)
	eventually(t, "the victim's connection is gone", func() bool { return s.numConns() == 2 })
}

func TestMemoryReturnsToTheOSAfterLoad(t *testing.T) {
	p := startServerProc(t, "", "-max-store-bytes", "1073741824", "-max-client-bytes", "1073741824")
	ctx := ctxTimeout(t, 120*time.Second)
	c, err := Dial(ctx, p.addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Set(ctx, "warm", []byte("up")))
	before, _ := p.memory()

	const n, size = 256, 1 << 20
	value := make([]byte, size)
	for i := range n {
		value[0] = byte(i)
		require.NoError(t, c.Set(ctx, "load/"+itoa(i), value))
	}
	loaded, _ := p.memory()
	require.Greater(t, loaded-before, int64(n*size/2), "the load is resident")
	for i := range n {
		_, err := c.Delete(ctx, "load/"+itoa(i))
		require.NoError(t, err)
	}
	// Nothing allocates any more: without the server's help the freed heap would stay
	// resident until the runtime's next collection, minutes away.
	start := time.Now()
	deadline := start.Add(20 * time.Second)
	for {
		rss, _ := p.memory()
		if rss <= before+64<<20 {
			t.Logf("resident %d MiB before, %d MiB loaded, %d MiB %v after the load ended", before>>20, loaded>>20, rss>>20, time.Since(start).Round(100*time.Millisecond))
			break
		}
		require.True(t, time.Now().Before(deadline), "resident %d MiB 20 s after the load ended (%d MiB before it)", rss>>20, before>>20)
		time.Sleep(100 * time.Millisecond)
	}
}

func itoa(i int) string { return big.NewInt(int64(i)).String() }

func TestOneClientCannotFillTheStoreForTheOthers(t *testing.T) {
	noLeaks(t)
	const budget = 8 << 20
	_, addr := startServer(t, WithMaxStoreBytes(budget))
	ctx := ctxTimeout(t, 60*time.Second)
	hog := dial(t, addr, fromHost(2)) // the others are on 127.0.0.1
	value := make([]byte, 64<<10)
	var full error
	for i := 0; full == nil && i < 1000; i++ {
		full = hog.Set(ctx, "hog/"+itoa(i), value)
	}
	require.ErrorIs(t, full, ErrStoreFull)
	assert.Contains(t, full.Error(), "this client's share of 1048576 bytes")

	// Every other client still sets keys and passes barriers.
	for r := range 4 {
		c := dial(t, addr)
		require.NoError(t, c.Set(ctx, "job/"+itoa(r), make([]byte, 128<<10)))
		require.NoError(t, c.Barrier(ctx, GenerationKey("fair", uint64(r), "b"), 0, 1))
	}
	// Deleting frees the hog's share again.
	_, err := hog.Delete(ctx, "hog/0")
	require.NoError(t, err)
	require.NoError(t, hog.Set(ctx, "hog/again", value))
}

// Wrong proofs are limited per address: past a burst, every answer to the address
// comes late (authSlowdown), so that one connection makes at most authFailRate
// guesses a second; a correct proof from that address is still checked and accepted.
func TestFailedAuthenticationsAreRateLimitedPerAddress(t *testing.T) {
	noLeaks(t)
	const token = "a-long-enough-token-for-tests"
	logs := &logBuffer{}
	_, addr := startServer(t, WithToken(token), WithLogger(logs.logger()))
	var checked int
	start := time.Now()
	for checked < 2*authFailBurst {
		r := rawDial(t, addr)
		_, hello := r.hello(ProtocolVersion)
		require.Equal(t, statusOK, hello.status)
		r.send(opAuth, 0, make([]byte, 32)) // a wrong proof
		f, err := r.recv()
		require.NoError(t, err)
		require.Equal(t, statusUnauthorized, f.status, "%q", f.fields)
		checked++
		_ = r.nc.Close()
	}
	elapsed := time.Since(start)
	// One guess at a time: past the burst, each answer waited authSlowdown.
	assert.GreaterOrEqual(t, elapsed, time.Duration(checked-authFailBurst-1)*authSlowdown, "%d wrong proofs answered in %v", checked, elapsed)

	// A correct proof from the same address is checked and accepted, late.
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = clientHandshake(nc, bufioReader(nc), token)
	_ = nc.Close()
	require.NoError(t, err, "a correct proof from an address over its limit was refused")

	// Another address is not slowed down.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	nc, err = d.Dial("tcp", addr)
	if err != nil {
		t.Logf("no second loopback address (%v); skipping that part", err)
		return
	}
	_ = nc.Close()
	ctx := ctxTimeout(t, 10*time.Second)
	nc, err = d.DialContext(ctx, "tcp", addr)
	require.NoError(t, err)
	defer nc.Close()
	_, err = clientHandshake(nc, bufioReader(nc), token)
	require.NoError(t, err, "a client from another address authenticates")
	n := strings.Count(logs.String(), "the client's proof does not match the token")
	assert.LessOrEqual(t, n, warnBurst+int(time.Since(start)/warnEvery)+1, "failed authentications are logged at a bounded rate")
}

func TestTLS(t *testing.T) {
	noLeaks(t)
	cert, pool := selfSigned(t)
	_, addr := startServer(t, WithTLS(&tls.Config{Certificates: []tls.Certificate{cert}}), WithToken("a-long-enough-token-for-tests"))
	ctx := ctxTimeout(t, 10*time.Second)
	c := dial(t, addr, WithTLS(&tls.Config{RootCAs: pool}), WithToken("a-long-enough-token-for-tests"))
	require.NoError(t, c.Set(ctx, "k", []byte("secret")))
	v, err := c.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, []byte("secret"), v)

	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = Dial(short, addr, WithToken("a-long-enough-token-for-tests"))
	require.Error(t, err, "a plaintext client gets nowhere")
	_, err = Dial(short, addr, WithTLS(&tls.Config{RootCAs: x509.NewCertPool()}))
	require.Error(t, err, "a client that cannot verify the certificate refuses the server")
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "rendezvous test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func TestDialNamesWhoNeverServedTheStore(t *testing.T) {
	noLeaks(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(nettest.Port(t)))
	err := dialPastARefusal(t, addr, WithServedBy("rank 0"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "rank 0 never served the store at "+addr)
	assert.Contains(t, err.Error(), "refused")
}

// numPending is the number of calls waiting for a reply (for tests).
func (c *Client) numPending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

var _ sync.Locker = (*sync.Mutex)(nil)
