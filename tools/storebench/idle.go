package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// idleOnly is -idle-only: the all-keys bring-up of n clients alone, on PyTorch's
// server (none when python is empty) and ncclgo's, each started afresh, rounds times
// in alternating order, and each server's resident memory per client idleWait after
// it, nothing forced to collect: the figure measure reports after the bring-up, in a
// few minutes per round instead of the whole run, and beside it the anonymous part
// (heap and stacks, without the file pages of the code the server ran).
func idleOnly(n int, python string, limit time.Duration, rounds int) {
	type fig struct {
		rss, anon float64 // KiB per client
	}
	starts := map[string]func() (*server, error){
		"ncclgo": func() (*server, error) { return startOurs(n, ""), nil },
	}
	order := []string{"ncclgo"}
	if argv := strings.Fields(python); len(argv) > 0 {
		starts["pytorch"] = func() (*server, error) { return startServer(argv, "-c", torchServer) }
		order = append([]string{"pytorch"}, order...)
	}
	var proto rendezvous.TorchProtocol
	all := make([]map[string]fig, 0, rounds)
	for round := range rounds {
		figs := map[string]fig{}
		for _, name := range order {
			srv, err := starts[name]()
			if err != nil {
				fatalf("start %s's server: %v", name, err)
			}
			if proto == 0 {
				proto = detect(srv.addr)
			}
			pid := srv.cmd.Process.Pid
			before, anon := srv.settledRSS(), statusKiB(pid, "RssAnon")
			srv.memReport("before the clients come", n)
			ph, stores := bringUpKeep(srv, n, limit, dialTorch(srv.addr, proto), allKeys)
			if ph == failed {
				fatalf("the all-keys bring-up of %d clients on %s's server did not finish within %s", n, name, limit)
			}
			time.Sleep(idleWait)
			f := fig{(rssKiB(pid) - before) / float64(n), (statusKiB(pid, "RssAnon") - anon) / float64(n)}
			srv.memReport(idleWait.String()+" after the bring-up", n)
			for _, c := range stores {
				_ = c.Close()
			}
			srv.stop()
			figs[name] = f
			fmt.Fprintf(os.Stderr, "storebench: round %d, %s: %.2f KiB per idle client (anonymous %.2f)\n", round+1, name, f.rss, f.anon)
		}
		all = append(all, figs)
		order = append(order[1:], order[0])
	}
	fmt.Printf("storebench -idle-only: %d clients, the all-keys bring-up over TCPStore protocol %d on a fresh server each, then silent; the server's resident memory per client %s after the bring-up (RSS, and its anonymous part), less what it was before, nothing forced to collect; ratio = ncclgo / PyTorch in the same round.\n\n", n, proto, idleWait)
	fmt.Println("| round | ncclgo KiB | PyTorch KiB | ratio | ncclgo anonymous KiB | PyTorch anonymous KiB | ratio |")
	fmt.Println("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for i, figs := range all {
		o := figs["ncclgo"]
		t, ok := figs["pytorch"]
		if !ok {
			fmt.Printf("| %d | %.2f | | | %.2f | | |\n", i+1, o.rss, o.anon)
			continue
		}
		fmt.Printf("| %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", i+1, o.rss, t.rss, o.rss/t.rss, o.anon, t.anon, o.anon/t.anon)
	}
}
