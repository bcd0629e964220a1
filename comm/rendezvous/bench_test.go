package rendezvous

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkRendezvous times what a job start does, for N ranks as goroutines on
// loopback: every rank connects (with a token), rank 0 publishes a 128-byte id, all
// meet in a Barrier, the others Get the id, and all close. Each op also runs, first,
// the floor under it: N goroutines that each open a plain TCP connection to an echo
// server, do one round trip and close. It reports the medians of both (rendezvous-ms,
// bare-ms), their ratio, and us/rank (the rendezvous median over N) to show growth.
func BenchmarkRendezvous(b *testing.B) {
	for _, n := range []int{64, 128, 256} {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			const token = "bench-token"
			_, addr := startServer(b, WithToken(token), WithMaxConns(2*n))
			echoAddr, stopEcho := startEcho(b)
			defer stopEcho()
			uid := make([]byte, 128)
			ctx := context.Background()
			gen := uint64(0)
			var rdzv, bare []time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				parallel(b, n, func(int) error { return bareConnect(echoAddr) })
				t1 := time.Now()
				gen++
				parallel(b, n, func(r int) error { return rendezvousOnce(ctx, addr, token, gen, r, n, uid) })
				bare = append(bare, t1.Sub(t0))
				rdzv = append(rdzv, time.Since(t1))
			}
			b.StopTimer()
			mr, mb := median(rdzv), median(bare)
			b.ReportMetric(float64(mr.Microseconds())/1000, "rendezvous-ms")
			b.ReportMetric(float64(mb.Microseconds())/1000, "bare-ms")
			b.ReportMetric(float64(mr)/float64(mb), "rendezvous/bare")
			b.ReportMetric(float64(mr.Microseconds())/float64(n), "us/rank")
		})
	}
}

// parallel runs f for ranks 0..n-1 in goroutines and fails b on the first error.
func parallel(b *testing.B, n int, f func(rank int) error) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for r := range n {
		wg.Go(func() {
			if err := f(r); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// bareConnect is one plain TCP connection with one round trip of an empty frame.
func bareConnect(addr string) error {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	msg := []byte{0, 0, 0, 0}
	if _, err := nc.Write(msg); err != nil {
		return err
	}
	_, err = io.ReadFull(nc, msg)
	return err
}

func rendezvousOnce(ctx context.Context, addr, token string, gen uint64, rank, world int, uid []byte) error {
	c, err := Dial(ctx, addr, WithToken(token))
	if err != nil {
		return err
	}
	defer c.Close()
	key := GenerationKey("bench", gen, "uid")
	if rank == 0 {
		if err := c.Set(ctx, key, uid); err != nil {
			return err
		}
	}
	if err := c.Barrier(ctx, GenerationKey("bench", gen, "barrier"), rank, world); err != nil {
		return err
	}
	if rank != 0 {
		got, err := c.Get(ctx, key)
		if err != nil {
			return err
		}
		if len(got) != len(uid) {
			return fmt.Errorf("rank %d got %d bytes", rank, len(got))
		}
	}
	return nil
}

// BenchmarkRoundTrip compares, in the same run and interleaved, a bare TCP echo of a
// frame the size of a Set of a 128-byte value with a Set and a Get of that value. It
// reports the medians (echo-ns, set-ns, get-ns) and their ratios to the echo
// (set/echo, get/echo; the target is at most 2).
func BenchmarkRoundTrip(b *testing.B) {
	_, addr := startServer(b)
	c := dial(b, addr)
	ctx := context.Background()
	key, value := "ncclgo/bench/gen/0/uid", make([]byte, 128)
	require.NoError(b, c.Set(ctx, key, value))

	echoAddr, stopEcho := startEcho(b)
	defer stopEcho()
	ec, err := net.Dial("tcp", echoAddr)
	require.NoError(b, err)
	defer ec.Close()
	var e encoder
	e.begin(opSet, statusOK, 1)
	e.string(key)
	e.bytes(value)
	msg, err := e.finish()
	require.NoError(b, err)
	timeRoundTrips(b, ec, msg, c, key, value)
}

// timeRoundTrips runs the loop of BenchmarkRoundTrip and BenchmarkTCPStoreRoundTrip:
// after warming up, an echo of msg on ec, a Set and a Get of key through s, in turn,
// timed one by one; it reports their medians and the ratios to the echo.
func timeRoundTrips(b *testing.B, ec net.Conn, msg []byte, s Store, key string, value []byte) {
	ctx := context.Background()
	echoBuf := make([]byte, len(msg))
	echo := func() {
		if _, err := ec.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(ec, echoBuf); err != nil {
			b.Fatal(err)
		}
	}
	for range 100 { // warm up both paths
		echo()
		_, _ = s.Get(ctx, key)
	}

	var echoes, sets, gets []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		echo()
		t1 := time.Now()
		if err := s.Set(ctx, key, value); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := s.Get(ctx, key); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		echoes = append(echoes, t1.Sub(t0))
		sets = append(sets, t2.Sub(t1))
		gets = append(gets, t3.Sub(t2))
	}
	b.StopTimer()
	me, ms, mg := median(echoes), median(sets), median(gets)
	b.ReportMetric(float64(me.Nanoseconds()), "echo-ns")
	b.ReportMetric(float64(ms.Nanoseconds()), "set-ns")
	b.ReportMetric(float64(mg.Nanoseconds()), "get-ns")
	b.ReportMetric(float64(ms)/float64(me), "set/echo")
	b.ReportMetric(float64(mg)/float64(me), "get/echo")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// startEcho runs a TCP server that sends every length-prefixed frame back, reading
// and writing the way the store's server does (buffered reader, one write per frame).
func startEcho(b *testing.B) (string, func()) {
	l, err := netListen()
	require.NoError(b, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				buf := make([]byte, 4096)
				for {
					if _, err := io.ReadFull(br, buf[:4]); err != nil {
						return
					}
					n := int(binary.BigEndian.Uint32(buf[:4]))
					if n > len(buf)-4 {
						return
					}
					if _, err := io.ReadFull(br, buf[4:4+n]); err != nil {
						return
					}
					if _, err := nc.Write(buf[:4+n]); err != nil {
						return
					}
				}
			})
		}
	})
	return l.Addr().String(), func() { _ = l.Close(); wg.Wait() }
}

// BenchmarkTCPStoreRoundTrip is BenchmarkRoundTrip for PyTorch's TCPStore protocol:
// a TCPStoreClient's Set (SET and CHECK in one write, one answer) and Get (WAIT, then
// GET: two round trips, as torch's own client does) of a 128-byte value on ncclgo's
// server, interleaved with a bare TCP echo of a message of the Set's size. It reports
// the medians (echo-ns, set-ns, get-ns) and their ratios to the echo (set/echo,
// get/echo); allocs/op counts client and server together.
func BenchmarkTCPStoreRoundTrip(b *testing.B) {
	_, addr := startServer(b)
	ctx := context.Background()
	c, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()))
	require.NoError(b, err)
	defer c.Close()
	key, value := "ncclgo/bench/gen/0/uid", make([]byte, 128)
	require.NoError(b, c.Set(ctx, key, value))

	echoAddr, stopEcho := startEcho(b)
	defer stopEcho()
	ec, err := net.Dial("tcp", echoAddr)
	require.NoError(b, err)
	defer ec.Close()
	msg := make([]byte, 4+1+8+1+len(key)+8+len(value)) // a length-prefixed frame of the Set's size
	binary.BigEndian.PutUint32(msg, uint32(len(msg)-4))
	timeRoundTrips(b, ec, msg, c, key, value)
}
