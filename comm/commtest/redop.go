package commtest

import (
	"fmt"
	"testing"

	"github.com/ncclgo/ncclgo/comm"
)

// preMulSummer is a Communicator with NCCL's PreMulSum operators
// (nccl.Communicator).
type preMulSummer interface {
	PreMulSum(t comm.DType, scalar float64) (comm.ReduceOp, error)
	PreMulSumDevice(t comm.DType, scalar comm.DevicePtr) (comm.ReduceOp, error)
	DestroyReduceOp(op comm.ReduceOp) error
}

// preMulSum checks PreMulSum operators on element type dt where the communicators
// have them: a host scalar of 2 doubles the sum; a device scalar is read when each
// operation runs (2, then 1 after the scalar is overwritten); a destroyed operator and
// one used on another element type fail with ErrInvalidOp without reaching the
// library. Communicators without them (no such methods, or ErrUnsupported on every
// rank) lack CapPreMulSum, which ends the case as unsupported says.
func (e *env) preMulSum(t *testing.T, cs []comm.Communicator, dt comm.DType, sync func(*testing.T)) {
	t.Run("pre-mul-sum", func(t *testing.T) { e.preMulSumCase(t, cs, dt, sync) })
}

func (e *env) preMulSumCase(t *testing.T, cs []comm.Communicator, dt comm.DType, sync func(*testing.T)) {
	mine := e.ranks()
	me := mine[0]
	pms := make([]preMulSummer, e.n)
	for _, r := range mine {
		p, ok := cs[r].(preMulSummer)
		if !ok {
			e.unsupported(t, CapPreMulSum, fmt.Sprintf("rank %d's %T has no PreMulSum method", r, cs[r]))
			return
		}
		pms[r] = p
	}
	n, es := e.n, dt.Size()
	const count = 5
	scaled := func(k float64) []byte {
		v := make([]float64, count)
		for i := range v {
			v[i] = k * reference(comm.Sum, dt, n, i)
		}
		b, err := EncodeValues(dt, v)
		require.NoError(t, err)
		return b
	}
	input := func(r int) []byte { return inputs(comm.Sum, dt, n, r, 0, count) }

	ops := make([]comm.ReduceOp, n)
	errs := e.try(t, func(r int) (err error) { ops[r], err = pms[r].PreMulSum(dt, 2); return err })
	if e.skipUnsupported(t, errs, CapPreMulSum, "pre-mul-sum") {
		return
	}
	ps := e.buffers(t, count*es, input)
	e.all(t, func(r int) error { return cs[r].AllReduce(ps[r], count, dt, ops[r]) })
	sync(t)
	for _, r := range mine {
		checkBytes(t, dt, scaled(2), e.read(t, r, ps[r], count*es), "all-reduce pre-mul-sum x2 (host scalar), rank %d", r)
	}
	e.all(t, func(r int) error { return pms[r].DestroyReduceOp(ops[r]) })
	e.expectFailure(t, "all-reduce with a destroyed pre-mul-sum", func() error { return cs[me].AllReduce(ps[me], count, dt, ops[me]) }, comm.ErrInvalidOp)
	e.expectFailure(t, "destroy a pre-mul-sum twice", func() error { return pms[me].DestroyReduceOp(ops[me]) }, comm.ErrInvalidOp)

	two, err := EncodeValues(dt, []float64{2})
	require.NoError(t, err)
	scalars := e.buffers(t, es, func(int) []byte { return two })
	e.all(t, func(r int) (err error) { ops[r], err = pms[r].PreMulSumDevice(dt, scalars[r]); return err })
	ps = e.buffers(t, count*es, input)
	send := e.buffers(t, count*es, input)
	e.all(t, func(r int) error { return cs[r].AllReduce(ps[r], count, dt, ops[r]) })
	sync(t)
	one, err := EncodeValues(dt, []float64{1})
	require.NoError(t, err)
	for _, r := range mine {
		checkBytes(t, dt, scaled(2), e.read(t, r, ps[r], count*es), "all-reduce pre-mul-sum x2 (device scalar), rank %d", r)
		require.NoError(t, e.mem.Write(r, scalars[r], one))
	}
	recv := e.buffers(t, count*es, nil)
	e.all(t, func(r int) error { return cs[r].ReduceScatter(send[r], recv[r], count/n, dt, ops[r]) })
	e.all(t, func(r int) error { return cs[r].AllReduceInto(send[r], ps[r], count, dt, ops[r]) })
	sync(t)
	for _, r := range mine {
		checkBytes(t, dt, scaled(1), e.read(t, r, ps[r], count*es), "all-reduce-into pre-mul-sum, device scalar now 1, rank %d", r)
		if k := count / n; k > 0 {
			checkBytes(t, dt, scaled(1)[r*k*es:(r+1)*k*es], e.read(t, r, recv[r], k*es), "reduce-scatter pre-mul-sum, device scalar now 1, rank %d", r)
		}
	}
	other := comm.Float64
	if dt == other {
		other = comm.Float32
	}
	e.expectFailure(t, "pre-mul-sum on another element type", func() error { return cs[me].AllReduce(ps[me], 1, other, ops[me]) }, comm.ErrInvalidOp)
	e.expectFailure(t, "pre-mul-sum null device scalar", func() error { _, err := pms[me].PreMulSumDevice(dt, 0); return err }, comm.ErrNullPointer)
	e.expectFailure(t, "pre-mul-sum invalid type", func() error { _, err := pms[me].PreMulSum(99, 1); return err }, comm.ErrInvalidType)
	e.all(t, func(r int) error { return pms[r].DestroyReduceOp(ops[r]) })
}
