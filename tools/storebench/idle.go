package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// idleFig is a server's idle memory after a bring-up: what its resident size grew by
// (RSS, and its anonymous part), in KiB.
type idleFig struct {
	rss, anon float64
}

// idleOnly is -idle-only: for each client count, the all-keys bring-up alone on
// PyTorch's server (none when python is empty) and ncclgo's, each started afresh,
// rounds times in alternating order, and each server's resident memory idleWait after
// it, nothing forced to collect: the figure measure reports after the bring-up, in a
// few minutes per round instead of the whole run, and beside it the anonymous part
// (heap and stacks, without the file pages of the code the server ran). With two
// counts or more it also gives what each client adds between them (idleSlopes).
func idleOnly(counts []int, python string, limit time.Duration, rounds int) {
	starts := map[string]func(n int) (*server, error){
		"ncclgo": func(n int) (*server, error) { return startOurs(n, ""), nil },
	}
	order := []string{"ncclgo"}
	if argv := strings.Fields(python); len(argv) > 0 {
		starts["pytorch"] = func(int) (*server, error) { return startServer(argv, "-c", torchServer) }
		order = append([]string{"pytorch"}, order...)
	}
	var proto rendezvous.TorchProtocol
	// grown[name][i][round]: what the server's resident memory grew by, in KiB, at
	// counts[i].
	grown := map[string][][]idleFig{}
	for _, name := range order {
		grown[name] = make([][]idleFig, len(counts))
	}
	for i, n := range counts {
		for round := range rounds {
			for _, name := range order {
				srv, err := starts[name](n)
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
				f := idleFig{rssKiB(pid) - before, statusKiB(pid, "RssAnon") - anon}
				srv.memReport(idleWait.String()+" after the bring-up", n)
				for _, c := range stores {
					_ = c.Close()
				}
				srv.stop()
				grown[name][i] = append(grown[name][i], f)
				fmt.Fprintf(os.Stderr, "storebench: %d clients, round %d, %s: %.2f KiB per idle client (anonymous %.2f)\n", n, round+1, name, f.rss/float64(n), f.anon/float64(n))
			}
			order = append(order[1:], order[0])
		}
	}
	fmt.Printf("storebench -idle-only: the all-keys bring-up over TCPStore protocol %d on a fresh server each, then silent; the server's resident memory per client %s after the bring-up (RSS, and its anonymous part), less what it was before, nothing forced to collect; ratio = ncclgo / PyTorch in the same round.\n\n", proto, idleWait)
	fmt.Println("| clients | round | ncclgo KiB | PyTorch KiB | ratio | ncclgo anonymous KiB | PyTorch anonymous KiB | ratio |")
	fmt.Println("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for i, n := range counts {
		per := float64(n)
		for r, o := range grown["ncclgo"][i] {
			if _, ok := grown["pytorch"]; !ok {
				fmt.Printf("| %d | %d | %.2f | | | %.2f | | |\n", n, r+1, o.rss/per, o.anon/per)
				continue
			}
			t := grown["pytorch"][i][r]
			fmt.Printf("| %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", n, r+1, o.rss/per, t.rss/per, o.rss/t.rss, o.anon/per, t.anon/per, o.anon/t.anon)
		}
	}
	if len(counts) < 2 {
		return
	}
	fmt.Println("\nWhat each client adds between two counts (the difference of the medians over the rounds, over the difference of the counts), and what is left at the smaller count once that is taken out (a fixed cost of the bring-up, spread over its clients):")
	fmt.Println("\n| server | clients | KiB per added client | anonymous | fixed part at the smaller count, KiB per client |")
	fmt.Println("| --- | --- | ---: | ---: | ---: |")
	for _, name := range order {
		for _, s := range idleSlopes(counts, grown[name]) {
			fmt.Printf("| %s | %d → %d | %.2f | %.2f | %.2f |\n", name, s.from, s.to, s.rss, s.anon, s.fixed)
		}
	}
}

// idleSlope is what each client adds to a server's idle memory between two client
// counts, and the rest of its figure at the smaller count, spread over its clients.
type idleSlope struct {
	from, to         int
	rss, anon, fixed float64 // KiB per client
}

// idleSlopes gives, for each pair of consecutive counts, the difference of the median
// growths over the difference of the counts: a fixed cost of the bring-up cancels out
// of it, and fixed is that cost at the smaller count, per client.
func idleSlopes(counts []int, grown [][]idleFig) []idleSlope {
	var out []idleSlope
	for i := 1; i < len(counts) && i < len(grown); i++ {
		a, b := counts[i-1], counts[i]
		if b == a || len(grown[i-1]) == 0 || len(grown[i]) == 0 {
			continue
		}
		ra, rb := medianFig(grown[i-1]), medianFig(grown[i])
		d := float64(b - a)
		s := idleSlope{from: a, to: b, rss: (rb.rss - ra.rss) / d, anon: (rb.anon - ra.anon) / d}
		s.fixed = (ra.rss - s.rss*float64(a)) / float64(a)
		out = append(out, s)
	}
	return out
}

// medianFig is the median of each field of figs (the mean of the middle two for an
// even count).
func medianFig(figs []idleFig) idleFig {
	med := func(get func(idleFig) float64) float64 {
		v := make([]float64, len(figs))
		for i, f := range figs {
			v[i] = get(f)
		}
		slices.Sort(v)
		m := len(v) / 2
		if len(v)%2 == 0 {
			return (v[m-1] + v[m]) / 2
		}
		return v[m]
	}
	return idleFig{med(func(f idleFig) float64 { return f.rss }), med(func(f idleFig) float64 { return f.anon })}
}
