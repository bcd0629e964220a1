// Command storebench drives PyTorch's own C++ TCPStore server and ncclgo's
// rendezvous server with the same Go load generator, over the same protocol
// (PyTorch's TCPStore protocol, whichever generation the torch installation speaks),
// in one run, and prints one table of clients x operation with both figures and their
// ratio, ncclgo / PyTorch, with the direction that favours ncclgo. Each server runs in
// a process of its own, started afresh for every client count, so that memory and CPU
// are measured per server: resident memory with every client connected and idle, less
// what it was before they came, per client, as a user reads it (RSS, nothing forced to
// collect) -idle-wait after the bring-up and again after a wake storm, and after
// ncclgo's server has returned its garbage to the system (PyTorch's frees as it goes);
// and the CPU time the server process used.
//
// For each client count N, against each server:
//   - the all-keys bring-up: every client connects, sets its own key, adds to a
//     counter, waits for all N keys (O(N^2) keys in all), gets rank 0's key and meets
//     the others in a barrier;
//   - a steady mix of set and get on those clients until -steady has passed;
//   - comm's join: N fresh clients make the store calls comm's own bring-up makes
//     (comm/generation.go: O(1) calls per rank).
//
// On ncclgo's server the two bring-ups also run through ncclgo's own protocol
// (rendezvous.Client), the one comm uses with its embedded store.
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
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
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
		serveNcclgo(os.Args[2:])
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "serve-evloop" {
		serveEvloop(os.Args[2:])
		return
	}
	clientsFlag := flag.String("clients", "1024,4096", "comma-separated client counts")
	python := flag.String("python", "/usr/bin/python3", "command that runs a python3 with torch (split on blanks)")
	steady := flag.Duration("steady", 2*time.Second, "duration of the steady set/get phase")
	flag.DurationVar(&idleWait, "idle-wait", idleWait, "how long the clients stay silent before each idle memory reading (after the bring-up, after a wake storm)")
	deadline := flag.Duration("deadline", 3*time.Minute, "time a bring-up may take before the server is reported as timed out")
	ownOnly := flag.Bool("own-only", false, "measure only the floor and the bring-ups through ncclgo's own protocol (no PyTorch, no TCPStore protocol; the all-keys one only up to 1,024 ranks unless STOREBENCH_ALLKEYS is set): for quick iterations")
	profile := flag.String("profile", "", "directory where ncclgo's server writes a CPU profile (cpu-N.pprof, and steady-N.pprof for the steady phase alone, which cpu-N.pprof and cpu-N-after.pprof leave out) and an allocation profile (allocs-N.pprof) for each client count N")
	flag.StringVar(&straceDir, "strace", "", "directory where `strace -c -f` writes the system calls each server makes in the steady phase (strace-ncclgo-N.txt, strace-pytorch-N.txt); it slows the servers: the run's figures are not comparable")
	evloop := flag.String("evloop", "", "experimental: measure only the steady phase (each client connects and sets its key, no bring-up) and the idle memory before it, for PyTorch's server, ncclgo's and a prototype event-loop server (Linux epoll, tools/storebench/evloop_linux.go), repeated -rounds times in alternating order; \"go\": its system calls through the scheduler, \"raw\": raw system calls, \"hybrid\": raw reads, writes and polls that do not block, the blocking epoll_wait through the scheduler")
	rounds := flag.Int("rounds", 1, "with -evloop or -idle-only: how many times to measure each server")
	idle := flag.Bool("idle-only", false, "measure only the idle memory per client after the all-keys bring-up, for each -clients count, on PyTorch's server (none with -python '') and ncclgo's, each started afresh, -rounds times in alternating order, and with two counts or more what each added client costs between them: for quick iterations on it")
	flag.BoolVar(&inTurnToo, "in-turn", false, "with -join-only: also measure comm's join over the TCPStore protocol made call by call, as on torch's own server (no ARRIVE), on ncclgo's server")
	joinOnly := flag.Bool("join-only", false, "measure only the floor and comm's join over both protocols on ncclgo's server (no PyTorch), each against the floor: for quick iterations on the bring-up; with -profile, the server's CPU profiles of the two joins are join-tcpstore-N.pprof and join-ncclgo-N.pprof")
	flag.Parse()
	if *evloop != "" {
		steadyOnly(*evloop, *clientsFlag, *python, *steady, *deadline, *rounds)
		return
	}
	if *idle {
		counts := parseCounts(*clientsFlag, rendezvous.MaxKeysPerRequest, " (with -idle-only, each client waits for every key in one request)")
		slices.Sort(counts)
		raiseFileLimit(4*slices.Max(counts) + 4096)
		idleOnly(slices.Compact(counts), *python, *deadline, max(*rounds, 1))
		return
	}
	if *profile != "" {
		f, err := os.Create(filepath.Join(*profile, "load.pprof"))
		if err != nil {
			fatalf("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatalf("%v", err)
		}
		defer pprof.StopCPUProfile()
	}
	counts := parseCounts(*clientsFlag, maxClients, "")
	raiseFileLimit(4*slices.Max(counts) + 4096)
	var rows []row
	torchVersion := ""
	type idleAt struct {
		n           int
		ours, torch float64 // KiB per idle client after the bring-up
	}
	var prev idleAt // the previous count's, for the figure per added client
	for _, n := range counts {
		if *ownOnly {
			rows = append(rows, ownRows(n, *deadline, *profile)...)
			continue
		}
		if *joinOnly {
			rows = append(rows, joinRows(n, *deadline, *profile)...)
			continue
		}
		if n > rendezvous.MaxKeysPerRequest {
			// Too many to wait for in one request (the all-keys pattern): the
			// bring-ups of comm's join only, and the floor.
			var scale []row
			torchVersion, scale = scaleRows(strings.Fields(*python), n, *deadline)
			rows = append(rows, scale...)
			fmt.Fprintf(os.Stderr, "storebench: %d clients done\n", n)
			continue
		}
		torch, err := startServer(strings.Fields(*python), "-c", torchServer)
		if err != nil {
			fatalf("start PyTorch's server: %v", err)
		}
		torchVersion = torch.version
		proto := detect(torch.addr)
		tr := measure(torch, n, proto, *steady, *deadline, func() *server {
			// After a bring-up that timed out: a fresh server for the rest.
			torch.stop()
			if torch, err = startServer(strings.Fields(*python), "-c", torchServer); err != nil {
				fatalf("restart PyTorch's server: %v", err)
			}
			return torch
		})
		torch.stop()
		ours := startOurs(n, *profile)
		or := measure(ours, n, proto, *steady, *deadline, func() *server { return ours })
		bare := floor(ours, n, *deadline)
		ownJoin := bringUp(ours, n, *deadline, dialOwn(ours.addr), joinLikeComm)
		ownAll := bringUp(ours, n, *deadline, dialOwn(ours.addr), allKeys)
		ours.stop()
		rows = append(rows,
			row{n, "bring-up, all-keys pattern, TCPStore protocol (ms)", or.allKeys.ms, tr.allKeys.ms, true},
			row{n, "  server CPU for it (ms)", or.allKeys.cpuMs, tr.allKeys.cpuMs, true},
			row{n, "bring-up, comm's join, TCPStore protocol (ms)", or.join.ms, tr.join.ms, true},
			row{n, "  server CPU for it (ms)", or.join.cpuMs, tr.join.cpuMs, true},
			row{n, "set p50 (µs)", or.setP50, tr.setP50, true},
			row{n, "set p99 (µs)", or.setP99, tr.setP99, true},
			row{n, "get p50 (µs)", or.getP50, tr.getP50, true},
			row{n, "get p99 (µs)", or.getP99, tr.getP99, true},
			row{n, "steady ops/s", or.opsPerSec, tr.opsPerSec, false},
			row{n, "server CPU per steady op (µs)", or.cpuPerOp, tr.cpuPerOp, true},
			row{n, "server CPU per request on an idle connection, parking again included (µs)", or.cpuPerIdleOp, tr.cpuPerIdleOp, true},
			row{n, "server peak KiB per client during the all-keys bring-up (VmHWM over RSS before it)", or.kibPeak, tr.kibPeak, true},
			row{n, "server KiB per idle client, " + idleWait.String() + " after the bring-up (RSS, no forced GC)", or.kibIdle, tr.kibIdle, true},
			row{n, "server KiB per idle client, " + idleWait.String() + " after a wake storm (RSS, no forced GC)", or.kibAfterStorm, tr.kibAfterStorm, true},
			row{n, "server KiB per idle client, after a forced GC", or.kibPerClient, tr.kibPerClient, true},
			row{n, floorOp, bare.ms, -1, true},
			row{n, "bring-up, comm's join, ncclgo protocol (ms)", ownJoin.ms, -1, true},
			row{n, "  server CPU for it (ms)", ownJoin.cpuMs, -1, true},
			row{n, "bring-up, all-keys pattern, ncclgo protocol (ms)", ownAll.ms, -1, true},
		)
		// After the all-keys bring-up only (one that timed out is followed by a
		// lighter one on a fresh server).
		cur := idleAt{n, allKeysIdle(or), allKeysIdle(tr)}
		if prev.n > 0 {
			// What the clients past the previous count cost each: a bring-up's fixed
			// cost, which the figures per client above spread over all, cancels out.
			rows = append(rows, row{n, fmt.Sprintf("server KiB per idle client past the first %d, %s after the bring-up (RSS, no forced GC)", prev.n, idleWait),
				perAdded(prev.n, prev.ours, n, cur.ours), perAdded(prev.n, prev.torch, n, cur.torch), true})
		}
		prev = cur
		fmt.Fprintf(os.Stderr, "storebench: %d clients done\n", n)
	}
	if *joinOnly {
		fmt.Printf("storebench: ncclgo's server alone (-join-only): comm's join over torch's TCPStore protocol 2 and over ncclgo's own, against the floor.\n")
	} else {
		fmt.Printf("storebench: PyTorch %s's C++ TCPStore server vs ncclgo's server, TCPStore protocol %d, steady %s.\n", torchVersion, detectedProto, *steady)
	}
	fmt.Printf("ratio = ncclgo / PyTorch; \"better\" says which way favours ncclgo (times, CPU and memory: below 1; ops/s: above 1).\n\n")
	fmt.Println("| clients | operation | ncclgo | PyTorch | ncclgo / PyTorch | better |")
	fmt.Println("| ---: | --- | ---: | ---: | ---: | --- |")
	for _, r := range rows {
		better := "lower"
		if !r.lowerIsBetter {
			better = "higher"
		}
		cell := func(v float64) string {
			switch {
			case v == timedOut:
				return fmt.Sprintf("> %s", *deadline)
			case v == skipped:
				return "skipped"
			case v < 0:
				return ""
			}
			return fmt.Sprintf("%.1f", v)
		}
		ratio := ""
		if r.ours >= 0 && r.torch > 0 {
			ratio = fmt.Sprintf("%.2f", r.ours/r.torch)
		}
		fmt.Printf("| %d | %s | %s | %s | %s | %s |\n", r.clients, r.op, cell(r.ours), cell(r.torch), ratio, better)
	}
}

// parseCounts reads -clients, comma-separated counts in 1..most; it exits naming
// the first that is not one (why says what bounds it, when not maxClients).
func parseCounts(list string, most int, why string) []int {
	var counts []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > most {
			fatalf("-clients: %q is not a count in 1..%d%s", f, most, why)
		}
		counts = append(counts, n)
	}
	return counts
}

// allKeysIdle is r's idle memory per client after its all-keys bring-up, or -1 when
// that bring-up failed (r's figure is then after a lighter one).
func allKeysIdle(r result) float64 {
	if r.allKeys == failed {
		return -1
	}
	return r.kibIdle
}

// perAdded is what each of the clients from a to b costs, given the cost per client
// at a (kibA) and at b (kibB); negative (no figure) when either was not measured.
func perAdded(a int, kibA float64, b int, kibB float64) float64 {
	if b <= a || kibA < 0 || kibB < 0 {
		return -1
	}
	return (kibB*float64(b) - kibA*float64(a)) / float64(b-a)
}

const floorOp = "floor: plain TCP connect, one 16-byte round trip, close (ms)"

// joinIdle is comm's join by n clients on srv, and the server's memory per client
// once they are all connected and idle (as in measure).
func joinIdle(srv *server, n int, deadline time.Duration, dial dialer) (phase, float64) {
	before := srv.settledRSS()
	ph, clients := bringUpKeep(srv, n, deadline, dial, joinLikeComm)
	kib := float64(timedOut)
	if ph != failed {
		time.Sleep(time.Second) // idle: see measure
		kib = (srv.settledRSS() - before) / float64(n)
	}
	for _, c := range clients {
		if c != nil {
			_ = c.Close()
		}
	}
	return ph, kib
}

// maxClients is the largest client count -clients takes.
const maxClients = 65536

// scaleRows measures the bring-up of comm's join by n clients (more than one request
// may wait for) on PyTorch's server and ncclgo's, and the floor.
func scaleRows(python []string, n int, deadline time.Duration) (torchVersion string, rows []row) {
	torch, err := startServer(python, "-c", torchServer)
	if err != nil {
		fatalf("start PyTorch's server: %v", err)
	}
	proto := detect(torch.addr)
	tj, tkib := joinIdle(torch, n, deadline, dialTorch(torch.addr, proto))
	torch.stop()
	var bare, oj, ownJoin phase
	var okib float64
	onFresh(n, "", func(s *server) { bare = floor(s, n, deadline) })
	onFresh(n, "", func(s *server) { oj, okib = joinIdle(s, n, deadline, dialTorch(s.addr, proto)) })
	onFresh(n, "", func(s *server) { ownJoin = bringUp(s, n, deadline, dialOwn(s.addr), joinLikeComm) })
	return torch.version, []row{
		{n, "bring-up, comm's join, TCPStore protocol (ms)", oj.ms, tj.ms, true},
		{n, "  server CPU for it (ms)", oj.cpuMs, tj.cpuMs, true},
		{n, "server KiB per idle client (after comm's join)", okib, tkib, true},
		{n, floorOp, bare.ms, -1, true},
		{n, "bring-up, comm's join, ncclgo protocol (ms)", ownJoin.ms, -1, true},
		{n, "  server CPU for it (ms)", ownJoin.cpuMs, -1, true},
		{n, "comm's join over the floor, TCPStore protocol", overFloor(oj, bare), overFloor(tj, bare), true},
		{n, "comm's join over the floor, ncclgo protocol", overFloor(ownJoin, bare), -1, true},
	}
}

// overFloor is a bring-up's time over the floor's measured in the same run; -1 when
// either did not finish.
func overFloor(p, floor phase) float64 {
	if p.ms < 0 || floor.ms <= 0 {
		return -1
	}
	return p.ms / floor.ms
}

// startOurs starts ncclgo's server in a process of its own.
func startOurs(n int, profile string) *server {
	self, err := os.Executable()
	if err != nil {
		fatalf("%v", err)
	}
	serveArgs := []string{"serve-ncclgo"}
	if profile != "" {
		serveArgs = append(serveArgs, profile, strconv.Itoa(n))
	}
	ours, err := startServer([]string{self}, serveArgs...)
	if err != nil {
		fatalf("start ncclgo's server: %v", err)
	}
	return ours
}

// ownRows measures only the bring-ups through ncclgo's own protocol (-own-only).
func ownRows(n int, deadline time.Duration, profile string) []row {
	ours := startOurs(n, profile)
	defer ours.stop()
	bare := floor(ours, n, deadline)
	join := bringUp(ours, n, deadline, dialOwn(ours.addr), joinLikeComm)
	all := phase{skipped, skipped}
	if n <= 1024 || os.Getenv("STOREBENCH_ALLKEYS") != "" {
		all = bringUp(ours, n, deadline, dialOwn(ours.addr), allKeys)
	}
	return []row{
		{n, floorOp, bare.ms, -1, true},
		{n, "bring-up, comm's join, ncclgo protocol (ms)", join.ms, -1, true},
		{n, "  server CPU for it (ms)", join.cpuMs, -1, true},
		{n, "bring-up, all-keys pattern, ncclgo protocol (ms)", all.ms, -1, true},
	}
}

// joinRows measures comm's join over the TCPStore protocol and over ncclgo's own on
// ncclgo's server, and the floor, with each join's ratio to the floor (-join-only).
func joinRows(n int, deadline time.Duration, profile string) []row {
	var bare, ts, own phase
	onFresh(n, "", func(s *server) { bare = floor(s, n, deadline) })
	profiled := func(name string, f func(s *server) phase) (p phase) {
		onFresh(n, profile, func(s *server) {
			if profile != "" {
				s.tell("profile join-" + name)
			}
			p = f(s)
		})
		return p
	}
	ts = profiled("tcpstore", func(s *server) phase {
		return bringUp(s, n, deadline, dialTorch(s.addr, rendezvous.TorchProtocol2), joinLikeComm)
	})
	own = profiled("ncclgo", func(s *server) phase { return bringUp(s, n, deadline, dialOwn(s.addr), joinLikeComm) })
	rows := append([]row{{n, floorOp, bare.ms, -1, true}}, joinVsFloor(n, bare, ts, own)...)
	if inTurnToo {
		inTurn := profiled("inturn", func(s *server) phase {
			return bringUp(s, n, deadline, dialTorch(s.addr, rendezvous.TorchProtocol2), joinInTurn)
		})
		rows = append(rows,
			row{n, "bring-up, comm's join call by call (as on torch's server), TCPStore protocol (ms)", inTurn.ms, -1, true},
			row{n, "  server CPU for it (ms)", inTurn.cpuMs, -1, true},
			row{n, "  over the floor", overFloor(inTurn, bare), -1, true})
	}
	return rows
}

// inTurnToo is -in-turn.
var inTurnToo bool

// onFresh runs f on an ncclgo server started for it, and stops it: each bring-up
// meets a fresh server, as rank 0's store is at a job's start, so that none finds the
// heap, pools and goroutine stacks of the one before (a first bring-up on a server
// took up to twice as long as the same one after it).
func onFresh(n int, profile string, f func(s *server)) {
	s := startOurs(n, profile)
	defer s.stop()
	f(s)
}

// joinVsFloor is the rows of comm's join over the TCPStore protocol (ts) and over
// ncclgo's own (own), each with its server CPU, and their times over the floor's.
func joinVsFloor(n int, floor, ts, own phase) []row {
	return []row{
		{n, "bring-up, comm's join, TCPStore protocol (ms)", ts.ms, -1, true},
		{n, "  server CPU for it (ms)", ts.cpuMs, -1, true},
		{n, "bring-up, comm's join, ncclgo protocol (ms)", own.ms, -1, true},
		{n, "  server CPU for it (ms)", own.cpuMs, -1, true},
		{n, "comm's join over the floor, TCPStore protocol", overFloor(ts, floor), -1, true},
		{n, "comm's join over the floor, ncclgo protocol", overFloor(own, floor), -1, true},
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

// serveNcclgo runs ncclgo's server on a loopback port until stdin closes; args, when
// given, are the directory of its profiles and the client count that names them.
func serveNcclgo(args []string) {
	if len(args) == 2 {
		f, err := os.Create(filepath.Join(args[0], "cpu-"+args[1]+".pprof"))
		if err != nil {
			fatalf("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatalf("%v", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
			a, err := os.Create(filepath.Join(args[0], "allocs-"+args[1]+".pprof"))
			if err != nil {
				fatalf("%v", err)
			}
			_ = pprof.Lookup("allocs").WriteTo(a, 0)
			_ = a.Close()
		}()
	}
	// As comm's rank 0 serves the store (comm/job.go): no TCP keepalives, a
	// handshake slot for every rank that may dial at once.
	lc := net.ListenConfig{KeepAlive: -1}
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		fatalf("%v", err)
	}
	// The budget counts an upper bound of what each blocked wait holds (8 KiB plus 256
	// bytes per key): 4,096 clients each waiting for 4,096 keys count about 4.6 GB, over
	// the default budget of 1 GiB, though the process holds far less (measured below).
	// PyTorch's server has no budget: give ncclgo's one that does not refuse the
	// bring-up, and keep every client's share of it at the default eighth.
	s := rendezvous.NewServer(rendezvous.WithLogger(slog.New(slog.DiscardHandler)), rendezvous.WithMaxConns(3*maxClients),
		rendezvous.WithMaxHandshakes(maxClients),
		rendezvous.WithMaxStoreBytes(16<<30))
	go func() { _ = s.Serve(context.Background(), l) }()
	echo, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0") // the floor's, accepted alike
	if err != nil {
		fatalf("%v", err)
	}
	go serveEcho(echo)
	fmt.Printf("PORT %d TORCH - ECHO %d\n", l.Addr().(*net.TCPAddr).Port, echo.Addr().(*net.TCPAddr).Port)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "profile "); ok && len(args) == 2 {
			// A CPU profile of its own from here on (-join-only).
			pprof.StopCPUProfile()
			f, err := os.Create(filepath.Join(args[0], name+"-"+args[1]+".pprof"))
			if err != nil {
				fatalf("%v", err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				fatalf("%v", err)
			}
			fmt.Println("ok")
			continue
		}
		if len(args) == 2 && (sc.Text() == "steady" || sc.Text() == "steady-end") {
			// The steady phase gets a profile of its own.
			pprof.StopCPUProfile()
			name := "steady-" + args[1] + ".pprof"
			if sc.Text() == "steady-end" {
				name = "cpu-" + args[1] + "-after.pprof"
			}
			f, err := os.Create(filepath.Join(args[0], name))
			if err != nil {
				fatalf("%v", err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				fatalf("%v", err)
			}
			fmt.Println("ok")
			continue
		}
		if path, ok := strings.CutPrefix(sc.Text(), "heap "); ok {
			// The live heap by allocation site, as it stands (the profile's last
			// collection; nothing is forced).
			if f, err := os.Create(path); err == nil {
				_ = pprof.Lookup("heap").WriteTo(f, 0)
				_ = f.Close()
			}
			fmt.Println("ok")
			continue
		}
		if sc.Text() == "memstats" {
			// Where the memory is, as it stands: nothing is collected.
			fmt.Fprintf(os.Stderr, "storebench: ncclgo's server, no forced GC: %s\n", goMemory())
			fmt.Println("ok")
			continue
		}
		// Before a memory reading: return the garbage of the bring-up to the system,
		// so that RSS counts what the server holds.
		runtime.GC()
		debug.FreeOSMemory()
		if os.Getenv("STOREBENCH_MEMSTATS") != "" {
			fmt.Fprintf(os.Stderr, "storebench: ncclgo's server, after a forced GC: %s\n", goMemory())
		}
		fmt.Println("ok")
	}
	_ = s.Close()
}

// goMemory says where the Go runtime's memory is (runtime/metrics, which collects
// nothing): live heap objects, heap the runtime holds free (resident until it is
// returned to the system), stacks, the runtime's own metadata and other memory, and
// the goroutines.
func goMemory() string {
	samples := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/stacks:bytes"},
		{Name: "/memory/classes/os-stacks:bytes"},
		{Name: "/memory/classes/metadata/mcache/inuse:bytes"},
		{Name: "/memory/classes/metadata/mspan/inuse:bytes"},
		{Name: "/memory/classes/metadata/other:bytes"},
		{Name: "/memory/classes/other:bytes"},
		{Name: "/memory/classes/profiling/buckets:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/sched/goroutines:goroutines"},
		{Name: "/gc/heap/allocs-by-size:bytes"},
	}
	metrics.Read(samples)
	kib := func(i int) uint64 {
		if samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return samples[i].Value.Uint64() >> 10
	}
	goroutines := uint64(0)
	if v := samples[11].Value; v.Kind() == metrics.KindUint64 {
		goroutines = v.Uint64()
	}
	return fmt.Sprintf("heap objects %d KiB, heap unused in spans %d KiB, heap free not released %d KiB, stacks %d KiB, runtime metadata %d KiB (mcache %d, mspan %d, other %d), runtime other %d KiB, released %d KiB, goroutines %d, size classes allocated from %d",
		kib(0), kib(1), kib(2), kib(3)+kib(4), kib(5)+kib(6)+kib(7), kib(5), kib(6), kib(7), kib(8)+kib(9), kib(10), goroutines, sizeClassesUsed(samples[12].Value))
}

// sizeClassesUsed counts the allocation size classes that have had an allocation
// since the process began, from /gc/heap/allocs-by-size:bytes (the large objects,
// above the last class, count as one). The runtime keeps metadata for each class in
// use (its span sets) and never returns it, so a process pays for each class once.
func sizeClassesUsed(v metrics.Value) int {
	if v.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	n := 0
	for _, c := range v.Float64Histogram().Counts {
		if c > 0 {
			n++
		}
	}
	return n
}

// serveEcho answers each connection's messages (a 4-byte length and that many bytes)
// with themselves: the floor under a bring-up.
func serveEcho(l net.Listener) {
	for {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer nc.Close()
			br := bufio.NewReader(nc)
			buf := make([]byte, 64)
			for {
				if _, err := io.ReadFull(br, buf[:4]); err != nil {
					return
				}
				n := 4 + int(buf[3])
				if _, err := io.ReadFull(br, buf[4:n]); err != nil {
					return
				}
				if _, err := nc.Write(buf[:n]); err != nil {
					return
				}
			}
		}()
	}
}

// floor is what n clients take to connect to the echo server, each with one round
// trip of a 16-byte message, and close: what any store's bring-up costs at least on
// this machine.
func floor(srv *server, n int, limit time.Duration) phase {
	settleTimeWait(n)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	cpu0 := cpuMs(srv.cmd.Process.Pid)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			d := net.Dialer{KeepAlive: -1, LocalAddr: source(i, n)}
			nc, err := d.DialContext(ctx, "tcp", srv.echo)
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			msg := []byte{0, 0, 0, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
			if _, err := nc.Write(msg); err != nil {
				errs <- err
				return
			}
			if _, err := io.ReadFull(nc, msg); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	ph := phase{ms: float64(time.Since(start).Microseconds()) / 1000, cpuMs: cpuMs(srv.cmd.Process.Pid) - cpu0}
	close(errs)
	for err := range errs {
		if ctx.Err() != nil {
			return failed
		}
		fatalf("floor of %d connections: %v", n, err)
	}
	return ph
}

type server struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     *bufio.Reader
	addr    string
	echo    string // ncclgo's: the echo server's address
	version string
	name    string // what the figures call it, when not the default (-evloop)
}

// tell sends the server a line and waits for its "ok".
func (s *server) tell(line string) {
	if _, err := io.WriteString(s.stdin, line+"\n"); err != nil {
		fatalf("server: %v", err)
	}
	if _, err := s.out.ReadString('\n'); err != nil {
		fatalf("server: %v", err)
	}
}

// straceDir is -strace's directory.
var straceDir string

// strace attaches `strace -c -f` to the server (-strace) and returns what detaches it.
func (s *server) strace(name string, n int) func() {
	if straceDir == "" {
		return func() {}
	}
	out := filepath.Join(straceDir, "strace-"+name+"-"+strconv.Itoa(n)+".txt")
	cmd := exec.Command("strace", "-c", "-f", "-o", out, "-p", strconv.Itoa(s.cmd.Process.Pid))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fatalf("strace: %v", err)
	}
	time.Sleep(500 * time.Millisecond) // attached to every thread
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}
}

// settledRSS asks the server to settle (ncclgo's returns its garbage to the system)
// and returns its resident memory in KiB.
func (s *server) settledRSS() float64 {
	s.tell("gc")
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
	srv := &server{cmd: cmd, stdin: in, out: br, addr: "127.0.0.1:" + strconv.Itoa(port), version: version}
	if f := strings.Fields(line); len(f) == 6 && f[4] == "ECHO" {
		srv.echo = "127.0.0.1:" + f[5]
	}
	return srv, nil
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
	return statusKiB(pid, "VmRSS")
}

// resetPeakRSS makes the peak resident size of process pid (VmHWM) its present one
// (Linux 4.0 and later); false when it cannot.
func resetPeakRSS(pid int) bool {
	return os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0) == nil
}

// statusKiB is the field of /proc/PID/status given in kB (VmRSS, RssAnon,
// RssFile), in KiB, or a count (Threads); 0 when it cannot be read.
func statusKiB(pid int, field string) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	return parseStatusKiB(string(b), field)
}

// parseStatusKiB reads field (given in kB) from the text of /proc/PID/status.
func parseStatusKiB(status, field string) float64 {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				return 0
			}
			return float64(n)
		}
	}
	return 0
}

// memReport prints, with STOREBENCH_MEMSTATS set, what the server's resident memory
// is made of at a reading without forced collection: anonymous memory (heap, stacks)
// against file pages (the code it has run), its threads (each holds a stack the Go
// runtime does not count), and for ncclgo's server where the Go runtime's memory is.
func (s *server) memReport(when string, n int) {
	if os.Getenv("STOREBENCH_MEMSTATS") == "" {
		return
	}
	pid := s.cmd.Process.Pid
	name := "PyTorch's server"
	if s.version == "-" {
		name = "ncclgo's server"
	}
	fmt.Fprintf(os.Stderr, "storebench: %s, %d clients, %s: RSS %.0f KiB (anonymous %.0f, file %.0f), threads %.0f\n",
		name, n, when, statusKiB(pid, "VmRSS"), statusKiB(pid, "RssAnon"), statusKiB(pid, "RssFile"), statusKiB(pid, "Threads"))
	if s.version == "-" {
		s.tell("memstats")
		if dir := os.Getenv("STOREBENCH_HEAP"); dir != "" {
			// With GODEBUG=memprofilerate=1, every allocation is in it.
			s.tell("heap " + filepath.Join(dir, fmt.Sprintf("heap-%d-%s.pprof", n, strings.ReplaceAll(when, " ", "-"))))
		}
	}
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
	allKeys, join                  phase
	setP50, setP99, getP50, getP99 float64 // µs
	opsPerSec                      float64
	cpuPerOp                       float64 // µs of server CPU per steady op
	userPerOp                      float64 // the part of it in user space
	kibPerClient                   float64
	kibIdle, kibAfterStorm         float64 // without forced collection (measure)
	kibPeak                        float64 // the all-keys bring-up's peak RSS over before it
	cpuPerIdleOp                   float64 // µs of server CPU per request on an idle connection
}

// idleWait is how long the clients stay silent before an idle memory reading (-idle-wait).
var idleWait = 10 * time.Second

// wakeStorm has every client send one query at once.
func wakeStorm(n int, stores []rendezvous.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := stores[i].Get(ctx, "storm"); err != nil {
				fatalf("wake storm: get: %v", err)
			}
		})
	}
	wg.Wait()
}

// phase is a bring-up: how long it took and the server CPU it used.
type phase struct{ ms, cpuMs float64 }

// timedOut marks a figure of a bring-up that did not finish within -deadline; skipped
// one that -own-only does not measure (the all-keys bring-up of more than 1,024 ranks,
// unless STOREBENCH_ALLKEYS is set).
const (
	timedOut = -2
	skipped  = -3
)

var failed = phase{timedOut, timedOut}

// dialer connects one rank.
type dialer func(ctx context.Context, from net.Addr) (rendezvous.Store, error)

func dialTorch(addr string, proto rendezvous.TorchProtocol) dialer {
	return func(ctx context.Context, from net.Addr) (rendezvous.Store, error) {
		return rendezvous.DialTCPStore(ctx, addr, rendezvous.WithTorchProtocol(proto), rendezvous.WithLocalAddr(from), quiet)
	}
}

func dialOwn(addr string) dialer {
	return func(ctx context.Context, from net.Addr) (rendezvous.Store, error) {
		return rendezvous.Dial(ctx, addr, rendezvous.WithLocalAddr(from), quiet)
	}
}

// ranksPerSource is how many of a bring-up's clients dial from one loopback address:
// one address has about 28,000 ports (net.ipv4.ip_local_port_range), less those the
// phases before left in TIME_WAIT, so larger bring-ups spread their clients over
// 127.0.0.1, 127.0.0.2, ... (Linux routes all of 127.0.0.0/8 to loopback).
const ranksPerSource = 4096

// source is the address rank dials from in a bring-up of world clients: 127.0.0.1
// up to ranksPerSource clients, else one of ceil(world/ranksPerSource) addresses.
func source(rank, world int) net.Addr {
	hosts := (world + ranksPerSource - 1) / ranksPerSource
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+rank%hosts))}
}

var quiet = rendezvous.WithLogger(slog.New(slog.DiscardHandler))

// pattern is what each of world ranks does in a bring-up; keys names this bring-up's
// keys.
type pattern func(ctx context.Context, s rendezvous.Store, keys func(string) string, rank, world int) error

// allKeys is the bring-up pattern: set its own key, add to a counter, wait for
// every rank's key (O(world) keys per rank, O(world^2) in all), get rank 0's key,
// barrier.
func allKeys(ctx context.Context, s rendezvous.Store, keys func(string) string, rank, world int) error {
	all := make([]string, world)
	for i := range all {
		all[i] = keys("rank/" + strconv.Itoa(i))
	}
	if err := s.Set(ctx, all[rank], []byte("value of "+all[rank])); err != nil {
		return err
	}
	if _, err := s.Add(ctx, keys("count"), 1); err != nil {
		return err
	}
	if err := s.Wait(ctx, all...); err != nil {
		return err
	}
	if _, err := s.Get(ctx, all[0]); err != nil {
		return err
	}
	return s.Barrier(ctx, keys("barrier"), rank, world)
}

// ownKey only sets the rank's own key, as allKeys does first.
func ownKey(ctx context.Context, s rendezvous.Store, keys func(string) string, rank, world int) error {
	k := keys("rank/" + strconv.Itoa(rank))
	return s.Set(ctx, k, []byte("value of "+k))
}

// joinLikeComm makes the store calls comm's bring-up makes for a rank (member.firstOpen
// and member.join in comm/job/generation.go, generation 0 of a fresh group). Over
// ncclgo's own client, and over torch's protocol on ncclgo's server, that is one
// Arrive (joinArrive); on torch's server the calls go one after the other
// (member.joinInTurn): look for the first open generation (a Check of
// 64 state keys), rank 0 publishes the 128-byte unique id if absent, each rank creates
// its marker if absent, adds itself to the count, the last one sets the state, and
// each waits for the state, the others for the id too. O(1) calls per rank, O(world)
// in all.
func joinLikeComm(ctx context.Context, s rendezvous.Store, keys func(string) string, rank, world int) error {
	switch c := s.(type) {
	case *rendezvous.Client:
		return joinArrive(ctx, c, keys, rank, world)
	case *rendezvous.TCPStoreClient:
		served, err := c.ServesArrivals(ctx)
		if err != nil {
			return err
		}
		if served {
			return joinArrive(ctx, c, keys, rank, world)
		}
	}
	return joinInTurn(ctx, s, keys, rank, world)
}

// joinInTurn is joinLikeComm on torch's own server: one call after the other.
func joinInTurn(ctx context.Context, s rendezvous.Store, keys func(string) string, rank, world int) error {
	gen := func(g int, name string) string { return keys(rendezvous.GenerationKey("bench", uint64(g), name)) }
	states := make([]string, 64)
	for i := range states {
		states[i] = gen(i, "state")
	}
	present, err := s.Check(ctx, states...)
	if err != nil {
		return err
	}
	if present[0] {
		return fmt.Errorf("generation 0 is closed already")
	}
	if rank == 0 {
		if _, fresh, err := s.CompareAndSet(ctx, gen(0, "uid"), nil, make([]byte, 128)); err != nil || !fresh {
			return fmt.Errorf("publish the id: fresh %v, %w", fresh, err)
		}
	}
	if _, fresh, err := s.CompareAndSet(ctx, gen(0, "rank/"+strconv.Itoa(rank)), nil, []byte{1}); err != nil || !fresh {
		return fmt.Errorf("publish the marker: fresh %v, %w", fresh, err)
	}
	n, err := s.Add(ctx, gen(0, "count"), 1)
	if err != nil {
		return err
	}
	if n == int64(world) {
		if _, _, err := s.CompareAndSet(ctx, gen(0, "state"), nil, []byte("ok")); err != nil {
			return err
		}
	}
	if state, err := s.Get(ctx, gen(0, "state")); err != nil || string(state) != "ok" {
		return fmt.Errorf("state %q, %w", state, err)
	}
	if rank != 0 {
		if id, err := s.Get(ctx, gen(0, "uid")); err != nil || len(id) != 128 {
			return fmt.Errorf("id of %d bytes, %w", len(id), err)
		}
	}
	return nil
}

// arriver is a client with Arrive (ncclgo's own, and the TCPStore client).
type arriver interface {
	Arrive(ctx context.Context, a rendezvous.Arrival) (rendezvous.Arrived, error)
}

// joinArrive is comm's join over a client that arrives in one request
// (member.joinAtOnce): one Arrive at the generation's latch, which creates the rank's
// marker (and rank 0's id) if absent, counts the rank, and is answered once all have
// arrived, with the id.
func joinArrive(ctx context.Context, c arriver, keys func(string) string, rank, world int) error {
	gen := func(name string) string { return keys(rendezvous.GenerationKey("bench", 0, name)) }
	a := rendezvous.Arrival{Done: gen("state"), DoneValue: []byte("ok"), Counter: gen("count"), Target: int64(world),
		Create: []rendezvous.KeyValue{{Key: gen("rank/" + strconv.Itoa(rank)), Value: []byte{1}}}}
	if rank == 0 {
		a.Create = append(a.Create, rendezvous.KeyValue{Key: gen("uid"), Value: make([]byte, 128)})
	} else {
		a.Read = []string{gen("uid")}
	}
	got, err := c.Arrive(ctx, a)
	switch {
	case err != nil:
		return err
	case got.Closed || got.Conflict >= 0 || string(got.Done) != "ok":
		return fmt.Errorf("arrival: closed %v, conflict %d, state %q", got.Closed, got.Conflict, got.Done)
	case rank != 0 && len(got.Values[0]) != 128:
		return fmt.Errorf("id of %d bytes", len(got.Values[0]))
	}
	return nil
}

// bringUps counts bring-ups, so that each uses keys of its own.
var bringUps int

// bringUp runs world ranks of pattern against srv, each dialing its own client, and
// closes them. A bring-up that does not finish within limit yields failed.
func bringUp(srv *server, world int, limit time.Duration, dial dialer, p pattern) phase {
	ph, clients := bringUpKeep(srv, world, limit, dial, p)
	for _, c := range clients {
		if c != nil {
			_ = c.Close()
		}
	}
	return ph
}

// bringUpKeep is bringUp that leaves the clients open (nil where one did not dial).
func bringUpKeep(srv *server, world int, limit time.Duration, dial dialer, p pattern) (phase, []rendezvous.Store) {
	settleTimeWait(world)
	bringUps++
	prefix := "b" + strconv.Itoa(bringUps) + "/"
	keys := func(k string) string { return prefix + k }
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	clients := make([]rendezvous.Store, world)
	var wg sync.WaitGroup
	errs := make(chan error, world)
	cpu0, drops0 := cpuMs(srv.cmd.Process.Pid), listenDrops()
	start := time.Now()
	for i := range world {
		wg.Go(func() {
			c, err := dial(ctx, source(i, world))
			if err == nil {
				clients[i] = c
				err = p(ctx, c, keys, i, world)
			}
			if err != nil {
				errs <- fmt.Errorf("rank %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	ph := phase{ms: float64(time.Since(start).Microseconds()) / 1000, cpuMs: cpuMs(srv.cmd.Process.Pid) - cpu0}
	if d := listenDrops() - drops0; d > 0 {
		fmt.Fprintf(os.Stderr, "storebench: %d connections dropped by full accept queues on this machine during a bring-up of %d clients (they retry after a second or more)\n", d, world)
	}
	close(errs)
	for err := range errs {
		if ctx.Err() != nil {
			fmt.Fprintf(os.Stderr, "storebench: bring-up of %d clients on %s did not finish within %s\n", world, srv.addr, limit)
			return failed, clients
		}
		fatalf("bring-up of %d clients on %s: %v", world, srv.addr, err)
	}
	return ph, clients
}

// listenDrops is the machine's count of connections dropped because a listener's
// accept queue was full (ListenDrops in /proc/net/netstat), -1 if unknown.
func listenDrops() int64 {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return -1
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		for j, name := range names {
			if name == "ListenDrops" && j < len(values) {
				n, _ := strconv.ParseInt(values[j], 10, 64)
				return n
			}
		}
	}
	return -1
}

// backlogDrops is the machine's count of packets dropped because a processor's input
// backlog was full (net.core.netdev_max_backlog; loopback traffic goes through it):
// the second column of /proc/net/softnet_stat, summed over processors; -1 if unknown.
// timeWaitMax is how long a measurement waits for the loopback sockets the last one
// left in TIME_WAIT to go (Linux keeps them 60 s).
const timeWaitMax = 75 * time.Second

// settleTimeWait waits, at most timeWaitMax, until fewer than n/8 (at least 64) TCP
// sockets are in TIME_WAIT, so that a measurement of n connections does not inherit
// the last one's: a bring-up started within a minute of the last took 15x as long,
// its connections colliding with thousands of sockets in TIME_WAIT.
func settleTimeWait(n int) {
	limit := max(n/8, 64)
	start := time.Now()
	first := timeWaits()
	for w := first; w >= limit && time.Since(start) < timeWaitMax; w = timeWaits() {
		time.Sleep(time.Second)
	}
	if first >= limit {
		fmt.Fprintf(os.Stderr, "storebench: waited %v for %d sockets in TIME_WAIT to go (now %d)\n", time.Since(start).Round(time.Second), first, timeWaits())
	}
}

// timeWaits counts the TCP sockets in TIME_WAIT (-1: unknown): the kernel's count in
// /proc/net/sockstat (one line, whatever the number of sockets), else a count of the
// sockets tables, which the kernel writes out socket by socket (with tens of
// thousands of sockets, a good part of a core while storebench waits).
func timeWaits() int {
	if b, err := os.ReadFile("/proc/net/sockstat"); err == nil {
		if n, ok := sockstatTW(string(b)); ok {
			return n
		}
	}
	n, known := 0, false
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		known = true
		n += countState(string(b), "06")
	}
	if !known {
		return -1
	}
	return n
}

// sockstatTW is the tw field of /proc/net/sockstat's TCP line (IPv4 and IPv6 sockets
// in TIME_WAIT).
func sockstatTW(sockstat string) (int, bool) {
	for _, l := range strings.Split(sockstat, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "TCP:" {
			continue
		}
		for i := 1; i+1 < len(f); i += 2 {
			if f[i] == "tw" {
				n, err := strconv.Atoi(f[i+1])
				return n, err == nil
			}
		}
	}
	return 0, false
}

// countState counts the sockets of a /proc/net/tcp table in state st (hex).
func countState(table, st string) int {
	n := 0
	for _, l := range strings.Split(table, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[3] == st {
			n++
		}
	}
	return n
}

func backlogDrops() int64 {
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		return -1
	}
	var n int64
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			d, _ := strconv.ParseInt(f[1], 16, 64)
			n += d
		}
	}
	return n
}

// cpuMs is the CPU time (user and system) the process has used so far.
func cpuMs(pid int) float64 { u, s := cpuTimes(pid); return u + s }

// userMs is the CPU time the process has used so far in user space.
func userMs(pid int) float64 { u, _ := cpuTimes(pid); return u }

// cpuTimes is the CPU time the process has used so far, in user space and in the
// kernel, in ms.
func cpuTimes(pid int) (user, sys float64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0
	}
	// Fields after the command name (which is in parentheses): utime is the 12th, stime
	// the 13th, in clock ticks (100 per second on Linux).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0, 0
	}
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return float64(u) * 10, float64(s) * 10
}

// measure runs n clients against srv: the all-keys bring-up, idle memory, the steady
// mix, then comm's join. An all-keys bring-up that does not finish within limit is
// reported as such; then restart gives a fresh server, n clients connect and set their
// key (the steady mix gets them), and the rest is measured on it.
func measure(srv *server, n int, proto rendezvous.TorchProtocol, steady, limit time.Duration, restart func() *server) result {
	var r result
	before := srv.settledRSS()
	srv.memReport("before the clients come", n)
	pid := srv.cmd.Process.Pid
	r.kibPeak = skipped
	peaked := resetPeakRSS(pid)
	var stores []rendezvous.Store
	r.allKeys, stores = bringUpKeep(srv, n, limit, dialTorch(srv.addr, proto), allKeys)
	if peaked && r.allKeys != failed {
		r.kibPeak = (statusKiB(pid, "VmHWM") - before) / float64(n)
	}
	if r.allKeys == failed {
		for _, c := range stores {
			if c != nil {
				_ = c.Close()
			}
		}
		srv = restart()
		before = srv.settledRSS()
		srv.memReport("before the clients come", n)
		var ph phase
		if ph, stores = bringUpKeep(srv, n, limit, dialTorch(srv.addr, proto), ownKey); ph == failed {
			for _, c := range stores {
				if c != nil {
					_ = c.Close()
				}
			}
			return result{failed, failed, timedOut, timedOut, timedOut, timedOut, timedOut, timedOut, timedOut, timedOut, timedOut, timedOut, timedOut, timedOut}
		}
	}
	// Idle memory as a user measures it: the server's resident size, with nothing
	// forced to collect, idleWait after the bring-up, and again idleWait after a wake
	// storm (every client sends a query at once, then all fall silent).
	pid = srv.cmd.Process.Pid
	if err := stores[0].Set(context.Background(), "storm", []byte("x")); err != nil {
		fatalf("set the storm's key: %v", err)
	}
	time.Sleep(idleWait)
	r.kibIdle = (rssKiB(pid) - before) / float64(n)
	srv.memReport(idleWait.String()+" after the bring-up", n)
	// The storm is one request on each idle connection: what it costs the server,
	// parking again included (ncclgo's server parks a connection 250 ms after its
	// last request), against a request on a busy connection (the steady mix).
	cpu0 := cpuMs(pid)
	wakeStorm(n, stores)
	time.Sleep(750 * time.Millisecond)
	r.cpuPerIdleOp = (cpuMs(pid) - cpu0) * 1000 / float64(n)
	time.Sleep(idleWait - 750*time.Millisecond)
	r.kibAfterStorm = (rssKiB(pid) - before) / float64(n)
	srv.memReport(idleWait.String()+" after a wake storm", n)
	// And what it holds: ncclgo's server first returns its garbage to the system.
	r.kibPerClient = (srv.settledRSS() - before) / float64(n)
	steadyMix(srv, n, stores, steady, &r)
	r.join = bringUp(srv, n, limit, dialTorch(srv.addr, proto), joinLikeComm)
	return r
}

func pct(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[(len(d)-1)*p/100].Nanoseconds()) / 1000
}

// steadyMix runs the steady set/get mix on the n clients in stores (each has set
// its key of the last bring-up), closes them, and fills r's steady figures.
func steadyMix(srv *server, n int, stores []rendezvous.Store, steady time.Duration, r *result) {
	ctx, cancel := context.WithTimeout(context.Background(), steady+time.Minute)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var sets, gets []time.Duration
	name := "pytorch"
	if srv.version == "-" {
		name = "ncclgo"
	}
	if srv.name != "" {
		name = srv.name
	}
	srv.tell("steady")
	detach := srv.strace(name, n)
	cpu0, drops0 := cpuMs(srv.cmd.Process.Pid), backlogDrops()
	user0 := userMs(srv.cmd.Process.Pid)
	deadline := time.Now().Add(steady)
	for i := range n {
		wg.Go(func() {
			c := stores[i]
			var s, g []time.Duration
			mine, other := "steady/"+strconv.Itoa(i), "b"+strconv.Itoa(bringUps)+"/rank/"+strconv.Itoa((i+1)%n)
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
	cpu := cpuMs(srv.cmd.Process.Pid) - cpu0
	user := userMs(srv.cmd.Process.Pid) - user0
	if d := backlogDrops() - drops0; d > 0 {
		fmt.Fprintf(os.Stderr, "storebench: %d packets dropped by full network backlogs on this machine during the steady phase on %s's server (each delays a reply by a retransmission timeout, 200 ms or more: the p99 figures of this run are not the server's)\n", d, name)
	}
	detach()
	srv.tell("steady-end")
	for _, c := range stores {
		_ = c.Close()
	}
	r.setP50, r.setP99 = pct(sets, 50), pct(sets, 99)
	r.getP50, r.getP99 = pct(gets, 50), pct(gets, 99)
	ops := len(sets) + len(gets)
	if straceDir != "" {
		fmt.Fprintf(os.Stderr, "storebench: steady phase of %d clients on %s's server: %d ops (%d sets, %d gets)\n", n, name, ops, len(sets), len(gets))
	}
	r.opsPerSec = float64(ops) / steady.Seconds()
	r.cpuPerOp = cpu * 1000 / float64(max(ops, 1))
	r.userPerOp = user * 1000 / float64(max(ops, 1))
}

// steadyOnly is -evloop: the steady phase alone on each of the three servers, rounds
// times, alternating their order, then a table of every round's figures and their
// ratios to PyTorch's in the same round.
func steadyOnly(mode, clients, python string, steady, limit time.Duration, rounds int) {
	n, err := strconv.Atoi(clients)
	if err != nil || n < 1 || n > rendezvous.MaxKeysPerRequest {
		fatalf("-clients: %q is not one count in 1..%d (with -evloop)", clients, rendezvous.MaxKeysPerRequest)
	}
	self, err := os.Executable()
	if err != nil {
		fatalf("%v", err)
	}
	starts := map[string]func() (*server, error){
		"pytorch": func() (*server, error) { return startServer(strings.Fields(python), "-c", torchServer) },
		"ncclgo":  func() (*server, error) { return startServer([]string{self}, "serve-ncclgo") },
		"evloop":  func() (*server, error) { return startServer([]string{self}, "serve-evloop", mode) },
	}
	order := []string{"pytorch", "ncclgo", "evloop"}
	var proto rendezvous.TorchProtocol
	type fig struct {
		name string
		r    result
	}
	var all [][]fig
	for round := range rounds {
		var figs []fig
		for _, name := range order {
			srv, err := starts[name]()
			if err != nil {
				fatalf("start %s's server: %v", name, err)
			}
			srv.name = name
			if proto == 0 {
				proto = detect(srv.addr)
			}
			var r result
			before := srv.settledRSS()
			ph, stores := bringUpKeep(srv, n, limit, dialTorch(srv.addr, proto), ownKey)
			if ph == failed {
				fatalf("%d clients did not connect to %s's server within %s", n, name, limit)
			}
			// Idle memory as measure reads it: nothing forced to collect.
			time.Sleep(idleWait)
			r.kibIdle = (rssKiB(srv.cmd.Process.Pid) - before) / float64(n)
			steadyMix(srv, n, stores, steady, &r)
			srv.stop()
			figs = append(figs, fig{name, r})
			fmt.Fprintf(os.Stderr, "storebench: round %d, %s: %.0f ops/s, %.1f µs CPU per op, %.1f KiB per idle client\n", round+1, name, r.opsPerSec, r.cpuPerOp, r.kibIdle)
		}
		slices.SortFunc(figs, func(a, b fig) int { return strings.Compare(b.name, a.name) }) // pytorch, ncclgo, evloop
		all = append(all, figs)
		order = append(order[1:], order[0]) // the next round starts with the next server
	}
	fmt.Printf("storebench -evloop %s: steady phase only, %d clients, %s each, TCPStore protocol %d; ratio = server / PyTorch's in the same round; idle KiB: the server's RSS per client %s after they connected and set their key, nothing forced to collect.\n\n", mode, n, steady, proto, idleWait)
	fmt.Println("| round | server | ops/s | CPU per op (µs) | user CPU per op (µs) | set p50 (µs) | set p99 (µs) | get p50 (µs) | get p99 (µs) | idle KiB per client | ops/s ratio | CPU/op ratio | user CPU/op ratio | get p50 ratio | get p99 ratio | idle KiB ratio |")
	fmt.Println("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for i, figs := range all {
		t := figs[0].r
		for _, f := range figs {
			r := f.r
			fmt.Printf("| %d | %s | %.0f | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", i+1, f.name,
				r.opsPerSec, r.cpuPerOp, r.userPerOp, r.setP50, r.setP99, r.getP50, r.getP99, r.kibIdle,
				r.opsPerSec/t.opsPerSec, r.cpuPerOp/t.cpuPerOp, r.userPerOp/t.userPerOp, r.getP50/t.getP50, r.getP99/t.getP99, r.kibIdle/t.kibIdle)
		}
	}
}
