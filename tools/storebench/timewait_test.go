package main

import (
	"net"
	"testing"
	"time"
)

// Sockets closed by the side that closes first stay in TIME_WAIT, which the next
// measurement used to inherit: timeWaits sees them, so that settleTimeWait waits.
func TestTimeWaitsCountsClosedLoopbackSockets(t *testing.T) {
	if timeWaits() < 0 {
		t.Skip("no /proc/net/tcp here")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go func() { b := make([]byte, 1); _, _ = nc.Read(b); _ = nc.Close() }()
		}
	}()
	before := timeWaits()
	const n = 200
	for range n {
		nc, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = nc.Close() // this side closes first: its socket goes to TIME_WAIT
	}
	deadline := time.Now().Add(30 * time.Second) // a hang guard
	for timeWaits() < before+n/2 {
		if time.Now().After(deadline) {
			t.Fatalf("timeWaits saw %d sockets in TIME_WAIT after %d closes (before: %d)", timeWaits(), n, before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCountState(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1
   1: 0100007F:1F90 0100007F:C000 06 00000000:00000000 03:00000100 00000000     0        0 0
   2: 0100007F:1F90 0100007F:C001 06 00000000:00000000 03:00000100 00000000     0        0 0
`
	if got := countState(table, "06"); got != 2 {
		t.Fatalf("countState(TIME_WAIT) = %d, want 2", got)
	}
	if got := countState(table, "0A"); got != 1 {
		t.Fatalf("countState(LISTEN) = %d, want 1", got)
	}
}

func TestSockstatTW(t *testing.T) {
	stat := "sockets: used 29\nTCP: inuse 16 orphan 0 tw 313 alloc 21 mem 240\nUDP: inuse 0 mem 0\n"
	if n, ok := sockstatTW(stat); !ok || n != 313 {
		t.Fatalf("sockstatTW = %d, %v; want 313, true", n, ok)
	}
	if _, ok := sockstatTW("sockets: used 29\nUDP: inuse 0 mem 0\n"); ok {
		t.Fatal("sockstatTW found a count in a table without a TCP line")
	}
}
