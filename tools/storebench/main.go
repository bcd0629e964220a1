// Command storebench drives PyTorch's own C++ TCPStore server and ncclgo's
// rendezvous server with the same Go load generator, over the same protocol
// (PyTorch's TCPStore protocol, whichever generation the torch installation speaks),
// in one run, and prints a table of clients x operation with both figures and their
// ratio. Each server runs in a process of its own, started afresh for every client
// count, so that memory is measured per server: resident memory with every client
// connected and idle, less what it was before they came, per client (ncclgo's server
// first returns its garbage to the system; PyTorch's frees as it goes).
//
// Every client does the bring-up pattern of a rank (connect, set its own key, add to a
// counter, wait for every rank's key, get rank 0's key, barrier), then a steady mix of
// set and get until -steady has passed. ncclgo's own protocol is measured for the
// bring-up as well.
//
//	go run ./tools/storebench -clients 1024,4096
//	go run ./tools/storebench -python '.ci/torch-chroot.sh run python3'   # torch 2.x
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

const torchServer = `
import resource, sys
import torch, torch.distributed as d
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
kw = dict(is_master=True, world_size=1, wait_for_workers=False)
try:
    s = d.TCPStore("127.0.0.1", 0, use_libuv=False, **kw)
except TypeError:
    s = d.TCPStore("127.0.0.1", 0, **kw)
print("PORT", s.port, "TORCH", torch.__version__, flush=True)
for line in sys.stdin:
    print("ok", flush=True)
`

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve-ncclgo" {
		serveNcclgo()
		return
	}
	clientsFlag := flag.String("clients", "1024,4096", "comma-separated client counts")
	python := flag.String("python", "/usr/bin/python3", "command that runs a python3 with torch (split on blanks)")
	steady := flag.Duration("steady", 2*time.Second, "duration of the steady set/get phase")
	deadline := flag.Duration("deadline", 3*time.Minute, "time a bring-up may take before the server is reported as timed out")
	flag.Parse()
	var counts []int
	for _, f := range strings.Split(*clientsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > rendezvous.MaxKeysPerRequest {
			fatalf("-clients: %q is not a count in 1..%d", f, rendezvous.MaxKeysPerRequest)
		}
		counts = append(counts, n)
	}
	var rows []row
	torchVersion := ""
	for _, n := range counts {
		torch, err := startServer(strings.Fields(*python), "-c", torchServer)
		if err != nil {
			fatalf("start PyTorch's server: %v", err)
		}
		torchVersion = torch.version
		proto := detect(torch.addr)
		tr := measure(torch, n, proto, *steady, *deadline)
		torch.stop()
		self, err := os.Executable()
		if err != nil {
			fatalf("%v", err)
		}
		ours, err := startServer([]string{self}, "serve-ncclgo")
		if err != nil {
			fatalf("start ncclgo's server: %v", err)
		}
		or := measure(ours, n, proto, *steady, *deadline)
		own := bringUpOwn(ours.addr, n)
		ours.stop()
		rows = append(rows,
			row{n, "bring-up (ms)", or.bringUp, tr.bringUp, true},
			row{n, "set p50 (µs)", or.setP50, tr.setP50, true},
			row{n, "set p99 (µs)", or.setP99, tr.setP99, true},
			row{n, "get p50 (µs)", or.getP50, tr.getP50, true},
			row{n, "get p99 (µs)", or.getP99, tr.getP99, true},
			row{n, "steady ops/s", or.opsPerSec, tr.opsPerSec, false},
			row{n, "server KiB per idle client", or.kibPerClient, tr.kibPerClient, true},
			row{n, "bring-up, ncclgo protocol (ms)", own, -1, true},
		)
		fmt.Fprintf(os.Stderr, "storebench: %d clients done\n", n)
	}
	fmt.Printf("storebench: PyTorch %s's C++ TCPStore server vs ncclgo's server, TCPStore protocol %d, steady %s; ratio = PyTorch / ncclgo for times and memory, ncclgo / PyTorch for ops/s (above 1: ncclgo better)\n\n",
		torchVersion, detectedProto, *steady)
	fmt.Println("| clients | operation | ncclgo | PyTorch | ratio |")
	fmt.Println("| ---: | --- | ---: | ---: | ---: |")
	for _, r := range rows {
		if r.ours == timedOut || r.torch == timedOut {
			cell := func(v float64) string {
				if v == timedOut {
					return fmt.Sprintf("> %s", *deadline)
				}
				return fmt.Sprintf("%.1f", v)
			}
			fmt.Printf("| %d | %s | %s | %s | |\n", r.clients, r.op, cell(r.ours), cell(r.torch))
			continue
		}
		if r.torch < 0 {
			fmt.Printf("| %d | %s | %.1f | | |\n", r.clients, r.op, r.ours)
			continue
		}
		ratio := r.torch / r.ours
		if !r.lowerIsBetter {
			ratio = r.ours / r.torch
		}
		fmt.Printf("| %d | %s | %.1f | %.1f | %.2fx |\n", r.clients, r.op, r.ours, r.torch, ratio)
	}
}

type row struct {
	clients       int
	op            string
	ours, torch   float64
	lowerIsBetter bool
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "storebench: "+format+"\n", args...)
	os.Exit(1)
}

// serveNcclgo runs ncclgo's server on a loopback port until stdin closes.
func serveNcclgo() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatalf("%v", err)
	}
	// The budget counts an upper bound of what each blocked wait holds (8 KiB plus 256
	// bytes per key): 4,096 clients each waiting for 4,096 keys count about 4.6 GB, over
	// the default budget of 1 GiB, though the process holds far less (measured below).
	// PyTorch's server has no budget: give ncclgo's one that does not refuse the
	// bring-up, and keep every client's share of it at the default eighth.
	s := rendezvous.NewServer(rendezvous.WithLogger(slog.New(slog.DiscardHandler)), rendezvous.WithMaxConns(3*rendezvous.MaxKeysPerRequest),
		rendezvous.WithMaxStoreBytes(16<<30))
	go func() { _ = s.Serve(context.Background(), l) }()
	fmt.Printf("PORT %d TORCH -\n", l.Addr().(*net.TCPAddr).Port)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		// Before a memory reading: return the garbage of the bring-up to the system,
		// so that RSS counts what the server holds.
		runtime.GC()
		debug.FreeOSMemory()
		fmt.Println("ok")
	}
	_ = s.Close()
}

type server struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     *bufio.Reader
	addr    string
	version string
}

// settledRSS asks the server to settle (ncclgo's returns its garbage to the system)
// and returns its resident memory in KiB.
func (s *server) settledRSS() float64 {
	if _, err := io.WriteString(s.stdin, "gc\n"); err != nil {
		fatalf("server: %v", err)
	}
	if _, err := s.out.ReadString('\n'); err != nil {
		fatalf("server: %v", err)
	}
	return rssKiB(s.cmd.Process.Pid)
}

func startServer(argv []string, args ...string) (*server, error) {
	cmd := exec.Command(argv[0], append(argv[1:], args...)...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	br := bufio.NewReader(out)
	line, err := br.ReadString('\n')
	var port int
	var version string
	if _, serr := fmt.Sscanf(line, "PORT %d TORCH %s", &port, &version); serr != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s printed %q (%v)", argv[0], line, errors.Join(err, serr))
	}
	return &server{cmd: cmd, stdin: in, out: br, addr: "127.0.0.1:" + strconv.Itoa(port), version: version}, nil
}

func (s *server) stop() {
	_ = s.stdin.Close()
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// rssKiB is the process's resident memory.
func rssKiB(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(n)
		}
	}
	return 0
}

var detectedProto rendezvous.TorchProtocol

func detect(addr string) rendezvous.TorchProtocol {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := rendezvous.DialTCPStore(ctx, addr, rendezvous.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fatalf("dial PyTorch's server: %v", err)
	}
	detectedProto = c.Protocol()
	_ = c.Close()
	return detectedProto
}

type result struct {
	bringUp                        float64 // ms
	setP50, setP99, getP50, getP99 float64 // µs
	opsPerSec                      float64
	kibPerClient                   float64
}

// timedOut marks a figure of a bring-up that did not finish within -deadline.
const timedOut = -2

// measure runs n clients against srv: bring-up, idle memory, then the steady mix. A
// bring-up that does not finish within limit yields timedOut everywhere.
func measure(srv *server, n int, proto rendezvous.TorchProtocol, steady, limit time.Duration) result {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	quiet := rendezvous.WithLogger(slog.New(slog.DiscardHandler))
	before := srv.settledRSS()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "rank/" + strconv.Itoa(i)
	}
	clients := make([]*rendezvous.TCPStoreClient, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			c, err := rendezvous.DialTCPStore(ctx, srv.addr, rendezvous.WithTorchProtocol(proto), quiet)
			if err != nil {
				errs <- err
				return
			}
			clients[i] = c
			err = c.Set(ctx, keys[i], []byte("value of "+keys[i]))
			if err == nil {
				_, err = c.Add(ctx, "count", 1)
			}
			if err == nil {
				err = c.Wait(ctx, keys...)
			}
			if err == nil {
				_, err = c.Get(ctx, keys[0])
			}
			if err == nil {
				err = c.Barrier(ctx, "barrier", i, n)
			}
			if err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	var r result
	r.bringUp = float64(time.Since(start).Microseconds()) / 1000
	close(errs)
	for err := range errs {
		if ctx.Err() != nil {
			fmt.Fprintf(os.Stderr, "storebench: bring-up of %d clients on %s did not finish within %s\n", n, srv.addr, limit)
			for _, c := range clients {
				if c != nil {
					_ = c.Close()
				}
			}
			return result{timedOut, timedOut, timedOut, timedOut, timedOut, timedOut, timedOut}
		}
		fatalf("bring-up of %d clients on %s: %v", n, srv.addr, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), steady+time.Minute)
	defer cancel()
	r.kibPerClient = (srv.settledRSS() - before) / float64(n)

	var mu sync.Mutex
	var sets, gets []time.Duration
	deadline := time.Now().Add(steady)
	for i := range n {
		wg.Go(func() {
			c := clients[i]
			var s, g []time.Duration
			mine, other := "steady/"+strconv.Itoa(i), keys[(i+1)%n]
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := c.Set(ctx, mine, []byte("x")); err != nil {
					fatalf("steady set: %v", err)
				}
				t1 := time.Now()
				if _, err := c.Get(ctx, other); err != nil {
					fatalf("steady get: %v", err)
				}
				s, g = append(s, t1.Sub(t0)), append(g, time.Since(t1))
			}
			mu.Lock()
			sets, gets = append(sets, s...), append(gets, g...)
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, c := range clients {
		_ = c.Close()
	}
	r.setP50, r.setP99 = pct(sets, 50), pct(sets, 99)
	r.getP50, r.getP99 = pct(gets, 50), pct(gets, 99)
	r.opsPerSec = float64(len(sets)+len(gets)) / steady.Seconds()
	return r
}

func pct(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[(len(d)-1)*p/100].Nanoseconds()) / 1000
}

// bringUpOwn brings up n ranks through ncclgo's own protocol (rendezvous.Client) on
// ncclgo's server and returns the milliseconds it took.
func bringUpOwn(addr string, n int) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	quiet := rendezvous.WithLogger(slog.New(slog.DiscardHandler))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "own/rank/" + strconv.Itoa(i)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	clients := make([]*rendezvous.Client, n)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			c, err := rendezvous.Dial(ctx, addr, quiet)
			if err != nil {
				errs <- err
				return
			}
			clients[i] = c
			err = c.Set(ctx, keys[i], []byte("v"))
			if err == nil {
				_, err = c.Add(ctx, "own/count", 1)
			}
			if err == nil {
				err = c.Wait(ctx, keys...)
			}
			if err == nil {
				_, err = c.Get(ctx, keys[0])
			}
			if err == nil {
				err = c.Barrier(ctx, "own/barrier", i, n)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	ms := float64(time.Since(start).Microseconds()) / 1000
	close(errs)
	for err := range errs {
		fatalf("ncclgo-protocol bring-up of %d: %v", n, err)
	}
	for _, c := range clients {
		_ = c.Close()
	}
	return ms
}
