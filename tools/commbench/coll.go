package main

// collective is one operation commbench measures, with nccl-tests' buffer layout and
// bandwidth formulas.
type collective struct {
	// name is nccl-tests' name, printed in the header: "all_reduce".
	name string
	// rooted collectives print their root; the others print -1.
	rooted bool
	// reduces collectives print their reduction operator; the others print "none".
	reduces bool
	// outOfPlace says comm offers the operation with distinct send and receive buffers
	// (every collective here does: AllReduceInto and BroadcastInto are the out-of-place
	// all-reduce and broadcast). Without it the out-of-place columns say N/A.
	outOfPlace bool
	// noInPlace: comm rejects one buffer for both sides (AllToAll, ErrOverlap): the
	// in-place columns say N/A.
	noInPlace bool
	// rootOnly: only the root's receive buffer holds a result (reduce, gather); the
	// other ranks' are not checked, as in nccl-tests.
	rootOnly bool
	// layout gives the element counts for a message of count elements on n ranks.
	layout func(count, n int64) layout
	// busFactor is busbw / algbw on n ranks.
	busFactor func(n int) float64
	// uncheckedInPlace: like nccl-tests, the in-place form is timed but its result is
	// not checked (#wrong is N/A): send/recv from and into one buffer races.
	uncheckedInPlace bool
	// algRanks is how many ranks' worth of the per-rank count algbw counts: n for
	// all-gather, reduce-scatter, alltoall, gather and scatter, 1 for the others.
	algRanks func(n int) int64
}

// layout is one message's element counts, as nccl-tests' getCollByteCount gives them.
type layout struct {
	send, recv int64 // elements in the send and the receive buffer
	param      int64 // the count passed to the operation
	// sendInPlace and recvInPlace are the element offsets, times the rank, of the send
	// and receive pointers inside the receive buffer for the in-place form.
	sendInPlace, recvInPlace int64
}

// bytes is the size column: the larger buffer.
func (l layout) bytes(elem int64) int64 { return max(l.send, l.recv) * elem }

func one(int) float64          { return 1 }
func ringFactor(n int) float64 { return float64(n-1) / float64(n) }
func oneRank(int) int64        { return 1 }
func allRanks(n int) int64     { return int64(n) }

// collectives lists every collective, in the order -op all runs them.
var collectives = []collective{
	{
		name: "all_reduce", reduces: true, outOfPlace: true,
		layout:    func(c, _ int64) layout { return layout{send: c, recv: c, param: c} },
		busFactor: func(n int) float64 { return 2 * ringFactor(n) },
		algRanks:  oneRank,
	},
	{
		name: "all_gather", outOfPlace: true,
		layout: func(c, n int64) layout {
			per := c / n
			return layout{send: per, recv: per * n, param: per, sendInPlace: per}
		},
		busFactor: ringFactor,
		algRanks:  allRanks,
	},
	{
		name: "reduce_scatter", reduces: true, outOfPlace: true,
		layout: func(c, n int64) layout {
			per := c / n
			return layout{send: per * n, recv: per, param: per, recvInPlace: per}
		},
		busFactor: ringFactor,
		algRanks:  allRanks,
	},
	{
		name: "broadcast", rooted: true, outOfPlace: true,
		layout:    func(c, _ int64) layout { return layout{send: c, recv: c, param: c} },
		busFactor: one,
		algRanks:  oneRank,
	},
	{
		name: "reduce", rooted: true, reduces: true, outOfPlace: true, rootOnly: true,
		layout:    func(c, _ int64) layout { return layout{send: c, recv: c, param: c} },
		busFactor: one,
		algRanks:  oneRank,
	},
	{
		name: "alltoall", outOfPlace: true, noInPlace: true,
		layout: func(c, n int64) layout {
			per := c / n
			return layout{send: per * n, recv: per * n, param: per}
		},
		busFactor: ringFactor,
		algRanks:  allRanks,
	},
	{
		name: "gather", rooted: true, outOfPlace: true, rootOnly: true,
		layout: func(c, n int64) layout {
			per := c / n
			return layout{send: per, recv: per * n, param: per, sendInPlace: per}
		},
		busFactor: ringFactor,
		algRanks:  allRanks,
	},
	{
		name: "scatter", rooted: true, outOfPlace: true,
		layout: func(c, n int64) layout {
			per := c / n
			return layout{send: per * n, recv: per, param: per, recvInPlace: per}
		},
		busFactor: ringFactor,
		algRanks:  allRanks,
	},
	{
		name: "sendrecv", outOfPlace: true, uncheckedInPlace: true,
		layout:    func(c, _ int64) layout { return layout{send: c, recv: c, param: c} },
		busFactor: one,
		algRanks:  oneRank,
	},
}

// bandwidth returns nccl-tests' algbw and busbw in GB/s (1 GB = 1e9 bytes) for an
// operation on param elements of elem bytes on n ranks that took sec seconds:
// algbw = S / t with S = param × elem × algRanks(n), busbw = algbw × busFactor(n).
func (c collective) bandwidth(param, elem int64, n int, sec float64) (alg, bus float64) {
	if sec <= 0 {
		return 0, 0
	}
	alg = float64(param*elem*c.algRanks(n)) / 1e9 / sec
	return alg, alg * c.busFactor(n)
}
