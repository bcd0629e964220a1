package flightrec

import (
	"fmt"
	"strings"
)

// unsignalled finds the first wait_signal that the signals its peer sent cannot
// satisfy: signals from one rank to another count up (each put_signal and signal is
// one), and each wait consumes its count (input size) in order. It returns the wait's
// point-to-point sequence number, the rank that did not send (the culprit) and the
// calls.
func unsignalled(byRank map[int][]*Entry, ranks []int, global func(string) (int, bool)) (int64, int, map[CallText][]int, bool) {
	sent := map[[2]int]int64{}
	type waitAt struct {
		e    *Entry
		need int64 // signals consumed once this wait is done
	}
	waits := map[[2]int][]waitAt{}
	consumed := map[[2]int]int64{}
	for _, r := range ranks {
		for _, e := range byRank[r] {
			_, meta, _ := strings.Cut(e.ProfilingName, " ")
			switch e.Op() {
			case "put_signal", "signal":
				a, b, _ := strings.Cut(meta, "->")
				s, ok1 := global(a)
				d, ok2 := global(b)
				if ok1 && ok2 {
					sent[[2]int{s, d}]++
				}
			case "wait_signal":
				a, b, _ := strings.Cut(meta, "<-")
				d, ok1 := global(a)
				s, ok2 := global(b)
				n := int64(1)
				if len(e.InputSizes) > 0 && len(e.InputSizes[0]) > 0 {
					n = e.InputSizes[0][0]
				}
				if ok1 && ok2 {
					k := [2]int{s, d}
					consumed[k] += n
					waits[k] = append(waits[k], waitAt{e, consumed[k]})
				}
			}
		}
	}
	found := false
	var seq int64
	var culprit int
	var calls map[CallText][]int
	for k, ws := range waits {
		for _, w := range ws {
			if w.need <= sent[k] {
				continue
			}
			if !found || w.e.P2PSeq < seq {
				found, seq, culprit = true, w.e.P2PSeq, k[0]
				text := CallText(fmt.Sprintf("wait_signal %d<-%d for %d signals, %d sent", k[1], k[0], w.need, sent[k]))
				calls = map[CallText][]int{text: {k[1]}}
			}
			break
		}
	}
	return seq, culprit, calls, found
}
