package flightrec

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Problem is the kind of disagreement Analyze finds in a communicator.
type Problem string

// Problems, first found first reported.
const (
	// NoDump: members of the communicator left no dump (a rank that died, or
	// could not write).
	NoDump Problem = "no dump"
	// Missing: some members never called the operation the others called.
	Missing Problem = "missing"
	// Mismatch: the members called different operations, sizes or types under one
	// sequence number.
	Mismatch Problem = "mismatch"
	// Unmatched: a send without its receive (the culprit is the receiver), or a
	// receive without its send (the culprit is the sender).
	Unmatched Problem = "unmatched"
	// Stuck: every member called the operation, and it did not complete everywhere.
	Stuck Problem = "not completed"
)

// CallText is what one rank called under one sequence number: its operation, sizes and
// types, as a short text ("all_reduce in [[1024]] out [[1024]] Float").
type CallText = string

// Verdict is what Analyze says of one communicator.
type Verdict struct {
	// Group is the communicator (its name, description and global ranks).
	Group GroupConfig
	// Problem is empty when its ranks agree on everything recorded.
	Problem Problem
	// P2P says whether Seq is a point-to-point sequence number.
	P2P bool
	// Seq is the first sequence number where the ranks disagree.
	Seq int64
	// Culprits are the ranks the problem names: those missing, those that called
	// what fewer ranks called, those without a dump, the peer that did not post the
	// other half of a send or receive.
	Culprits []int
	// Calls maps what was called under Seq to the ranks that called it.
	Calls map[CallText][]int
	// LastCompleted is, per rank with a dump, its last completed operation in the
	// communicator ("#4 all_reduce"), or "none".
	LastCompleted map[int]string
	// Inferred says the membership was guessed from the entries: the dumps did not
	// describe the communicator (torch 2.14's gloo backend leaves pg_config empty).
	Inferred bool
	// Victims maps each culprit of a Missing verdict that never called the operation
	// because it is blocked in an earlier operation of another communicator to that
	// operation: such a rank is a victim of the other communicator's problem, not the
	// cause of this one. "Earlier" is the order in which the ranks' records put the two
	// operations (or, where no rank recorded both, the operations before them at the
	// same distance, one sequence number per step).
	Victims map[int]Waiting
	// Elsewhere maps each other culprit of a Missing verdict with an operation pending
	// in another communicator to that operation: one that comes later than the
	// operation it never called, or whose order is unknown.
	Elsewhere map[int]Waiting
}

// Waiting is an operation a rank has not completed, in a communicator.
type Waiting struct {
	Group GroupConfig
	P2P   bool
	Seq   int64
	Op    string
}

// String describes the operation: communicator "mpi:0" (ranks [0 1 2 3]) collective #3 all_reduce.
func (w Waiting) String() string {
	kind := "collective"
	if w.P2P {
		kind = "p2p"
	}
	return fmt.Sprintf("communicator %q (ranks %v) %s #%d %s", w.Group.Name, w.Group.Ranks, kind, w.Seq, w.Op)
}

// Victim reports whether the verdict's problem is only a consequence of another's:
// every rank it names as missing is blocked in an earlier operation of another
// communicator (Victims).
func (v Verdict) Victim() bool {
	if v.Problem != Missing || len(v.Culprits) == 0 {
		return false
	}
	for _, r := range v.Culprits {
		if _, ok := v.Victims[r]; !ok {
			return false
		}
	}
	return true
}

// gkey identifies a communicator across ranks: its name and members.
type gkey struct{ name, ranks string }

// Analyze compares the dumps of a job's ranks and returns one Verdict per
// communicator: first those whose problem is a cause, then those whose missing ranks
// are victims blocked in another communicator's earlier operation (Verdict.Victim),
// then those without a problem. The order of traces does not matter.
func Analyze(traces []*Trace) []Verdict {
	byRank := map[int]*Trace{}
	for _, t := range traces {
		byRank[t.Rank] = t
	}
	groups := map[gkey]GroupConfig{}
	inferred := map[gkey]bool{}
	entries := map[gkey]map[int][]*Entry{}
	// The communicator of each entry, for the victims' pending operations.
	comm := map[*Entry]gkey{}
	// Membership the entries imply, for names no pg_config describes.
	implied := map[string][]int{}
	for _, t := range traces {
		for i := range t.Entries {
			name := t.Entries[i].Group
			if _, ok := t.Groups[name]; !ok && !slices.Contains(implied[name], t.Rank) {
				implied[name] = append(implied[name], t.Rank)
			}
		}
	}
	for _, t := range traces {
		for i := range t.Entries {
			e := &t.Entries[i]
			g, ok := t.Groups[e.Group]
			if !ok {
				rs := slices.Sorted(slices.Values(implied[e.Group]))
				g = GroupConfig{Name: e.Group, Desc: e.Desc, Ranks: rs}
			}
			k := gkey{g.Name, fmt.Sprint(g.Ranks)}
			if _, seen := groups[k]; !seen {
				groups[k] = g
				inferred[k] = !ok
				entries[k] = map[int][]*Entry{}
			}
			entries[k][t.Rank] = append(entries[k][t.Rank], e)
			comm[e] = k
		}
	}
	var out []Verdict
	for k, g := range groups {
		v := Verdict{Group: g, Inferred: inferred[k], LastCompleted: map[int]string{}}
		if v.Group.Desc == "" {
			v.Group.Desc = "undefined"
		}
		var noDump []int
		for _, r := range g.Ranks {
			if _, ok := byRank[r]; !ok {
				noDump = append(noDump, r)
				continue
			}
			v.LastCompleted[r] = lastCompleted(entries[k][r])
		}
		if !compareCollectives(&v, entries[k]) && !compareP2P(&v, entries[k]) && len(noDump) > 0 {
			v.Problem, v.Culprits = NoDump, noDump
		} else if len(noDump) > 0 && v.Problem == Missing {
			// The ranks without a dump cannot say what they called.
			v.Culprits = slices.DeleteFunc(v.Culprits, func(r int) bool { return slices.Contains(noDump, r) })
			if len(v.Culprits) == 0 {
				v.Problem, v.Culprits = NoDump, noDump
			}
		}
		out = append(out, v)
	}
	findVictims(out, byRank, groups, comm)
	rank := func(v Verdict) int {
		switch {
		case v.Problem == "":
			return 2
		case v.Victim():
			return 1
		}
		return 0
	}
	slices.SortFunc(out, func(a, b Verdict) int {
		if c := rank(a) - rank(b); c != 0 {
			return c
		}
		if c := strings.Compare(a.Group.Name, b.Group.Name); c != 0 {
			return c
		}
		return strings.Compare(fmt.Sprint(a.Group.Ranks), fmt.Sprint(b.Group.Ranks))
	})
	return out
}

func lastCompleted(es []*Entry) string {
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].State == "completed" {
			return "#" + strconv.FormatInt(es[i].Seq(), 10) + " " + es[i].Op()
		}
	}
	return "none"
}

// callText describes the operations a rank called under one sequence number.
func callText(es []*Entry) CallText {
	var parts []string
	for _, e := range es {
		if e.Op() == "coalesced" {
			continue
		}
		op := e.Op()
		s := op
		// Sizes that may differ between ranks are left out, as torch's analyzer
		// leaves them out: a scatter's input and a gather's output (the root's
		// differ), an all-to-all's (the splits may).
		if op != "barrier" {
			if op != "scatter" && !strings.HasPrefix(op, "all_to_all") {
				s += " in " + fmt.Sprint(e.InputSizes)
			}
			if op != "gather" && !strings.HasPrefix(op, "all_to_all") {
				s += " out " + fmt.Sprint(e.OutputSizes)
			}
			s += " " + strings.Join(slices.Compact(slices.Clone(e.InputTypes)), ",")
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "coalesced"
	}
	return strings.Join(parts, " + ")
}

// compareCollectives finds the first collective sequence number where the members
// disagree; it reports whether it found one (or a stuck operation).
func compareCollectives(v *Verdict, byRank map[int][]*Entry) bool {
	seqs := map[int]map[int64][]*Entry{}
	lo, hi := int64(0), int64(-1)
	present := 0
	for _, r := range v.Group.Ranks {
		es, ok := byRank[r]
		if !ok {
			continue
		}
		m := map[int64][]*Entry{}
		first := int64(-1)
		for _, e := range es {
			if e.IsP2P {
				continue
			}
			m[e.CollectiveSeq] = append(m[e.CollectiveSeq], e)
			if first < 0 {
				first = e.CollectiveSeq
			}
			hi = max(hi, e.CollectiveSeq)
		}
		seqs[r] = m
		if first >= 0 {
			lo = max(lo, first) // the rings' common window
			present++
		}
	}
	if present == 0 {
		return false
	}
	ranks := slices.Sorted(maps.Keys(seqs))
	for s := lo; s <= hi; s++ {
		calls := map[CallText][]int{}
		var missing []int
		for _, r := range ranks {
			es, ok := seqs[r][s]
			if !ok {
				missing = append(missing, r)
				continue
			}
			t := callText(es)
			calls[t] = append(calls[t], r)
		}
		if len(calls) == 0 {
			continue
		}
		if len(missing) > 0 {
			v.Problem, v.Seq, v.Culprits, v.Calls = Missing, s, missing, calls
			return true
		}
		if len(calls) > 1 {
			v.Problem, v.Seq, v.Calls = Mismatch, s, calls
			v.Culprits = fewest(calls)
			return true
		}
	}
	// Every rank agrees: is the last operation done everywhere?
	calls := map[CallText][]int{}
	var notDone []int
	for _, r := range ranks {
		es := seqs[r][hi]
		if len(es) == 0 {
			continue
		}
		calls[callText(es)] = append(calls[callText(es)], r)
		if es[len(es)-1].State != "completed" {
			notDone = append(notDone, r)
		}
	}
	if len(notDone) > 0 && len(notDone) < len(ranks) {
		v.Problem, v.Seq, v.Culprits, v.Calls = Stuck, hi, notDone, calls
		return true
	}
	return false
}

// fewest returns the ranks of the calls fewer ranks made than the one most ranks
// made; none when no call has more ranks than every other (two ranks, one call each:
// nothing tells which is wrong).
func fewest(calls map[CallText][]int) []int {
	most, ties := 0, 0
	for _, rs := range calls {
		switch {
		case len(rs) > most:
			most, ties = len(rs), 1
		case len(rs) == most:
			ties++
		}
	}
	if ties > 1 {
		return nil
	}
	var out []int
	for _, rs := range calls {
		if len(rs) < most {
			out = append(out, rs...)
		}
	}
	slices.Sort(out)
	return out
}

// opKey names an operation across ranks: its communicator's name (the parts of a
// split share it; a rank is in one of them), kind and sequence number.
type opKey struct {
	name string
	p2p  bool
	seq  int64
}

// findVictims fills Victims and Elsewhere of each collective Missing verdict: for
// every missing rank, the first operation it has not completed in another
// communicator, and whether that operation comes before the one it never called.
func findVictims(vs []Verdict, byRank map[int]*Trace, groups map[gkey]GroupConfig, comm map[*Entry]gkey) {
	// Where each rank recorded each operation: the index of its first entry.
	order := map[int]map[opKey]int{}
	for r, t := range byRank {
		m := map[opKey]int{}
		for i := range t.Entries {
			e := &t.Entries[i]
			k := opKey{e.Group, e.IsP2P, e.Seq()}
			if _, ok := m[k]; !ok {
				m[k] = i
			}
		}
		order[r] = m
	}
	for i := range vs {
		v := &vs[i]
		if v.Problem != Missing || v.P2P {
			continue
		}
		self := gkey{v.Group.Name, fmt.Sprint(v.Group.Ranks)}
		missed := opKey{v.Group.Name, false, v.Seq}
		for _, r := range v.Culprits {
			t := byRank[r]
			if t == nil {
				continue
			}
			for j := range t.Entries {
				e := &t.Entries[j]
				k := comm[e]
				if e.State == "completed" || k == self {
					continue
				}
				w := Waiting{Group: groups[k], P2P: e.IsP2P, Seq: e.Seq(), Op: e.Op()}
				if before(order, opKey{e.Group, e.IsP2P, e.Seq()}, missed) {
					if v.Victims == nil {
						v.Victims = map[int]Waiting{}
					}
					v.Victims[r] = w
				} else {
					if v.Elsewhere == nil {
						v.Elsewhere = map[int]Waiting{}
					}
					v.Elsewhere[r] = w
				}
				break
			}
		}
	}
}

// before reports whether the ranks' records put operation a before b: most of the
// ranks that recorded both did; where none did, the operations one sequence number
// earlier each, and so on back. A tie, or no evidence, is false.
func before(order map[int]map[opKey]int, a, b opKey) bool {
	for d := int64(0); d <= min(a.seq, b.seq); d++ {
		x, y := a, b
		x.seq -= d
		y.seq -= d
		votes := 0
		for _, m := range order {
			i, ok1 := m[x]
			j, ok2 := m[y]
			if !ok1 || !ok2 {
				continue
			}
			if i < j {
				votes++
			} else {
				votes--
			}
		}
		if votes != 0 {
			return votes > 0
		}
	}
	return false
}

// p2p is one send or receive, with global ranks.
type p2p struct {
	e        *Entry
	src, dst int
}

// compareP2P pairs each rank's sends with its peers' receives, in order; the first
// without its match is the problem.
func compareP2P(v *Verdict, byRank map[int][]*Entry) bool {
	global := func(local string) (int, bool) {
		n, err := strconv.Atoi(local)
		if err != nil || n < 0 || n >= len(v.Group.Ranks) {
			return 0, false
		}
		return v.Group.Ranks[n], true
	}
	sends := map[[2]int][]p2p{}
	recvs := map[[2]int][]p2p{}
	for _, r := range v.Group.Ranks {
		for _, e := range byRank[r] {
			_, meta, _ := strings.Cut(e.ProfilingName, " ")
			switch e.Op() {
			case "send":
				a, b, _ := strings.Cut(meta, "->")
				s, ok1 := global(a)
				d, ok2 := global(b)
				if ok1 && ok2 {
					sends[[2]int{s, d}] = append(sends[[2]int{s, d}], p2p{e, s, d})
				}
			case "recv":
				a, b, _ := strings.Cut(meta, "<-")
				d, ok1 := global(a)
				s, ok2 := global(b)
				if ok1 && ok2 {
					recvs[[2]int{s, d}] = append(recvs[[2]int{s, d}], p2p{e, s, d})
				}
			}
		}
	}
	type bad struct {
		seq  int64
		v    Verdict
		seen bool
	}
	var first bad
	note := func(seq int64, culprit int, calls map[CallText][]int, p Problem) {
		if !first.seen || seq < first.seq {
			first = bad{seq, Verdict{Problem: p, P2P: true, Seq: seq, Culprits: []int{culprit}, Calls: calls}, true}
		}
	}
	pairs := slices.Collect(maps.Keys(sends))
	for k := range recvs {
		if _, ok := sends[k]; !ok {
			pairs = append(pairs, k)
		}
	}
	for _, k := range pairs {
		ss, rs := sends[k], recvs[k]
		for i := range max(len(ss), len(rs)) {
			switch {
			case i >= len(rs):
				// The receiver never posted the receive.
				note(ss[i].e.P2PSeq, k[1], map[CallText][]int{"send " + p2pText(ss[i]): {k[0]}}, Unmatched)
			case i >= len(ss):
				// The sender never sent.
				note(rs[i].e.P2PSeq, k[0], map[CallText][]int{"recv " + p2pText(rs[i]): {k[1]}}, Unmatched)
			case fmt.Sprint(ss[i].e.InputSizes, ss[i].e.InputTypes) != fmt.Sprint(rs[i].e.OutputSizes, rs[i].e.OutputTypes):
				note(ss[i].e.P2PSeq, k[0], map[CallText][]int{"send " + p2pText(ss[i]): {k[0]}, "recv " + p2pText(rs[i]): {k[1]}}, Mismatch)
			default:
				continue
			}
			break
		}
	}
	if seq, culprit, calls, ok := unsignalled(byRank, v.Group.Ranks, global); ok {
		note(seq, culprit, calls, Unmatched)
	}
	if !first.seen {
		return false
	}
	v.Problem, v.P2P, v.Seq, v.Culprits, v.Calls = first.v.Problem, true, first.v.Seq, first.v.Culprits, first.v.Calls
	return true
}

func p2pText(p p2p) string {
	sizes, types := p.e.InputSizes, p.e.InputTypes
	if p.e.Op() == "recv" {
		sizes, types = p.e.OutputSizes, p.e.OutputTypes
	}
	return fmt.Sprintf("%d->%d %v %s", p.src, p.dst, sizes, strings.Join(types, ","))
}

// Report writes the verdicts as a few lines per communicator, for an incident.
func Report(w io.Writer, vs []Verdict) error {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "communicator %q (%s, ranks %v", v.Group.Name, v.Group.Desc, v.Group.Ranks)
		if v.Inferred {
			b.WriteString(", membership inferred from the entries")
		}
		b.WriteString("): ")
		kind := "collective"
		if v.P2P {
			kind = "p2p"
		}
		switch v.Problem {
		case "":
			b.WriteString("ranks agree\n")
		case NoDump:
			fmt.Fprintf(&b, "no dump from ranks %v\n", v.Culprits)
		case Mismatch:
			if len(v.Culprits) == 0 {
				fmt.Fprintf(&b, "%s #%d: %s, no culprit: as many ranks made each call\n", kind, v.Seq, v.Problem)
			} else {
				fmt.Fprintf(&b, "%s #%d: %s ranks %v\n", kind, v.Seq, v.Problem, v.Culprits)
			}
		default:
			fmt.Fprintf(&b, "%s #%d: %s ranks %v", kind, v.Seq, v.Problem, v.Culprits)
			if v.Victim() {
				b.WriteString(", victims of another communicator")
			}
			b.WriteString("\n")
		}
		if v.Problem != "" && v.Problem != NoDump {
			for _, t := range slices.Sorted(maps.Keys(v.Calls)) {
				fmt.Fprintf(&b, "  ranks %v called %s\n", v.Calls[t], t)
			}
		}
		if v.Problem == Missing && !v.P2P {
			for _, r := range v.Culprits {
				if w, ok := v.Victims[r]; ok {
					fmt.Fprintf(&b, "  rank %d is blocked in an earlier operation: %s (a victim)\n", r, w)
				} else if w, ok := v.Elsewhere[r]; ok {
					fmt.Fprintf(&b, "  rank %d skipped it: its pending %s comes later (the cause)\n", r, w)
				} else {
					fmt.Fprintf(&b, "  rank %d has nothing pending elsewhere (the cause)\n", r)
				}
			}
		}
		if v.Problem != "" {
			b.WriteString("  last completed:")
			for _, r := range slices.Sorted(maps.Keys(v.LastCompleted)) {
				fmt.Fprintf(&b, " rank %d %s;", r, v.LastCompleted[r])
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
