package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

func startTestEvloop(t *testing.T, mode string) string {
	t.Helper()
	_, port, err := startEvloop(mode)
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

// TestEvloopServesTCPStore drives the event-loop server with ncclgo's TCPStore
// client: set, get, check, add, and a wait that a later set ends.
func TestEvloopServesTCPStore(t *testing.T) {
	for _, mode := range []string{"go", "raw", "hybrid"} {
		t.Run(mode, func(t *testing.T) {
			addr := startTestEvloop(t, mode)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dial := func() *rendezvous.TCPStoreClient {
				c, err := rendezvous.DialTCPStore(ctx, addr, rendezvous.WithTorchProtocol(rendezvous.TorchProtocol2), quiet)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			a, b := dial(), dial()
			if err := a.Set(ctx, "k", []byte("value")); err != nil {
				t.Fatal(err)
			}
			if v, err := b.Get(ctx, "k"); err != nil || string(v) != "value" {
				t.Fatalf("get k = %q, %v; want \"value\"", v, err)
			}
			if err := a.Set(ctx, "k", []byte("longer value")); err != nil {
				t.Fatal(err)
			}
			if v, err := b.Get(ctx, "k"); err != nil || string(v) != "longer value" {
				t.Fatalf("get k after overwrite = %q, %v", v, err)
			}
			if ok, err := a.Check(ctx, "k", "absent"); err != nil || !ok[0] || ok[1] {
				t.Fatalf("check k, absent = %v, %v; want [true false]", ok, err)
			}
			for want := int64(1); want <= 3; want++ {
				if n, err := a.Add(ctx, "count", 1); err != nil || n != want {
					t.Fatalf("add = %d, %v; want %d", n, err, want)
				}
			}
			waited := make(chan error, 1)
			go func() { waited <- b.Wait(ctx, "later", "k") }()
			select {
			case err := <-waited:
				t.Fatalf("wait for an absent key returned before it was set: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
			if err := a.Set(ctx, "later", []byte("x")); err != nil {
				t.Fatal(err)
			}
			if err := <-waited; err != nil {
				t.Fatalf("wait: %v", err)
			}
		})
	}
}

// TestEvloopPartialRequests sends requests a byte at a time: the server keeps the
// partial ones until they are complete and answers each once.
func TestEvloopPartialRequests(t *testing.T) {
	addr := startTestEvloop(t, "raw")
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(time.Minute))
	str := func(b []byte, s string) []byte {
		return append(binary.LittleEndian.AppendUint64(b, uint64(len(s))), s...)
	}
	var req []byte
	req = binary.LittleEndian.AppendUint32(append(req, 0), 0x3C85F7CE)   // VALIDATE
	req = binary.LittleEndian.AppendUint32(append(req, 13), 0xffff1234)  // PING
	req = str(str(append(req, 1), "/k"), "v")                            // SET
	req = str(binary.LittleEndian.AppendUint64(append(req, 5), 1), "/k") // CHECK
	req = str(append(req, 3), "/k")                                      // GET
	for i := range req {
		if _, err := nc.Write(req[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	want := binary.LittleEndian.AppendUint32(nil, 0xffff1234)
	want = str(append(want, 0), "v")
	got := make([]byte, len(want))
	if _, err := io.ReadFull(nc, got); err != nil {
		t.Fatalf("read %d reply bytes: %v", len(want), err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("replies %x, want %x", got, want)
	}
	// A query the server does not serve ends the connection.
	if _, err := nc.Write([]byte{99}); err != nil {
		t.Fatal(err)
	}
	if n, err := nc.Read(got); err == nil {
		t.Fatalf("after an unknown query the server answered %x", got[:n])
	}
}
