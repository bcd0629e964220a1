package rendezvous

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// procCPU returns the CPU time the process pid has run, summed over its threads
// (/proc/PID/task/*/schedstat, nanoseconds).
func procCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	require.NoError(tb, err)
	require.NotEmpty(tb, tasks, "no schedstat for process %d", pid)
	var sum time.Duration
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread has ended
		}
		fields := strings.Fields(string(b))
		if len(fields) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(fields[0], 10, 64)
		require.NoError(tb, err)
		sum += time.Duration(ns)
	}
	return sum
}

// parkedVsBusyCPU runs rounds of one request (a TCPStore ADD) on each of conns
// connections to a tools/rendezvous process, once on connections that are all parked,
// their parking again afterwards included (the CPU is read parkAfter+300 ms after the
// round), and busy passes of the same requests on connections that are in use. It
// returns the server's CPU per request in both modes.
func parkedVsBusyCPU(tb testing.TB, conns, rounds int) (parked, busy time.Duration) {
	tb.Helper()
	if !pollSupported {
		tb.Skip("parking idle connections is implemented on Linux only")
	}
	if _, err := os.Stat("/proc/self/task"); err != nil {
		tb.Skip("no /proc: the server's CPU time cannot be read")
	}
	p := startServerProc(tb, "")
	pid := p.cmd.Process.Pid
	ctx := ctxTimeout(tb, 10*time.Minute)
	cs := make([]*TCPStoreClient, conns)
	for i := range cs {
		c, err := DialTCPStore(ctx, p.addr, WithLogger(discardLogger()))
		require.NoError(tb, err)
		tb.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	pass := func() {
		for i, c := range cs {
			_, err := c.Add(ctx, "bench/"+strconv.Itoa(i), 1)
			require.NoError(tb, err)
		}
	}
	pass() // past each connection's first query
	settle := parkAfter + 300*time.Millisecond
	var parkedCPU, busyCPU time.Duration
	var parkedN, busyN int
	for range rounds {
		// Parked: every connection has been silent long enough to be parked.
		time.Sleep(settle)
		c0 := procCPU(tb, pid)
		pass()
		time.Sleep(settle) // parking again included
		parkedCPU += procCPU(tb, pid) - c0
		parkedN += conns
		// Busy: the first passes wake every connection (a connection woken after a
		// long silence parks again after one request, and stays on its goroutine when
		// its client speaks again soon), the next ones find them in use.
		pass()
		pass()
		c0 = procCPU(tb, pid)
		for range 3 {
			pass()
		}
		busyCPU += procCPU(tb, pid) - c0
		busyN += 3 * conns
	}
	return parkedCPU / time.Duration(parkedN), busyCPU / time.Duration(busyN)
}

// BenchmarkParkedRequestCPU states what parking costs: the server CPU (a
// tools/rendezvous process, all its threads) of a request on a parked connection,
// its parking again included, beside a request on a busy connection, in the same
// run: parked-µs/req, busy-µs/req and their ratio parked/busy. An iteration is a
// round of one request on each of 256 parked connections and three on each of them
// busy (about 1.3 s); -benchtime 10x gives ten rounds.
func BenchmarkParkedRequestCPU(b *testing.B) {
	parked, busy := parkedVsBusyCPU(b, 256, b.N)
	b.ReportMetric(float64(parked.Nanoseconds())/1e3, "parked-µs/req")
	b.ReportMetric(float64(busy.Nanoseconds())/1e3, "busy-µs/req")
	b.ReportMetric(float64(parked)/float64(busy), "parked/busy")
}
