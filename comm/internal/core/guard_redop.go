package core

import "fmt"

const OpPreMulSum = "pre-mul-sum"

// checkOp accepts the built-in operators and the live PreMulSum operators of t.
func (g *Guard) checkOp(op string, r ReduceOp, t DType) error {
	if r.Valid() {
		return nil
	}
	if g.OnlyOps != "" {
		return &ArgError{Op: op, Arg: "op", Value: int32(r), Err: ErrInvalidOp,
			Reason: "not sum, prod, max, min or avg (" + g.OnlyOps + ")"}
	}
	if r >= FirstPreMulSum {
		g.mu.Lock()
		dt, ok := g.ops[r]
		g.mu.Unlock()
		switch {
		case ok && dt == t:
			return nil
		case ok:
			return &ArgError{Op: op, Arg: "op", Value: int32(r), Err: ErrInvalidOp,
				Reason: fmt.Sprintf("pre-mul-sum operator made for %s, used on %s", dt, t)}
		}
		return &ArgError{Op: op, Arg: "op", Value: int32(r), Err: ErrInvalidOp,
			Reason: "not sum, prod, max, min or avg, nor a live pre-mul-sum operator of this communicator (PreMulSum; destroyed, or lost in a reconnect)"}
	}
	return checkOp(op, r)
}

// addOp records a new PreMulSum operator.
func (g *Guard) AddOp(r ReduceOp, t DType) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ops == nil {
		g.ops = make(map[ReduceOp]DType)
	}
	g.ops[r] = t
}

// removeOp forgets a PreMulSum operator, failing for one that is not live.
func (g *Guard) RemoveOp(r ReduceOp) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.ops[r]; !ok {
		return g.ranked(&ArgError{Op: "destroy-reduce-op", Arg: "op", Value: int32(r), Err: ErrInvalidOp,
			Reason: "not a live pre-mul-sum operator of this communicator"})
	}
	delete(g.ops, r)
	return nil
}

// dropOps forgets every PreMulSum operator (the communicator that owned them ended).
func (g *Guard) DropOps() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ops = nil
}
