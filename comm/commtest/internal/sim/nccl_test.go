package sim

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/kernels"
)

func int32s(vals []int32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

func randInt32s(rng *rand.Rand, n int) []int32 {
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(rng.Uint32())
	}
	return v
}

func TestCommInitRankBlockingWaitsForEveryRank(t *testing.T) {
	r := newRig(t, 4)
	for i, c := range r.c {
		res, err := r.d[i].CommGetAsyncError(c)
		require.NoError(t, err)
		assert.Equal(t, gpulib.Success, res)
		n, err := r.d[i].CommCount(c)
		require.NoError(t, err)
		assert.Equal(t, 4, n)
		rank, err := r.d[i].CommUserRank(c)
		require.NoError(t, err)
		assert.Equal(t, i, rank)
	}
}

func TestCommInitRankNonBlockingIsInProgressUntilEveryRankArrives(t *testing.T) {
	w := newWorld(t, 3)
	d := make([]*Driver, 3)
	for i := range d {
		d[i], _ = w.Driver(i)
	}
	id, err := d[0].GetUniqueID()
	require.NoError(t, err)
	c0, err := d[0].CommInitRank(3, id, 0, gpulib.Config{})
	assert.Equal(t, gpulib.InProgress, ncclCode(err))
	require.NotZero(t, c0)
	res, err := d[0].CommGetAsyncError(c0)
	require.NoError(t, err)
	assert.Equal(t, gpulib.InProgress, res)
	p, _ := w.Alloc(0, 4)
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(d[0].AllReduce(p, p, 1, gpulib.Int32, gpulib.Sum, c0, 0)),
		"a communicator still initialising refuses work")

	_, err = d[1].CommInitRank(3, id, 1, gpulib.Config{})
	assert.Equal(t, gpulib.InProgress, ncclCode(err))
	c2, err := d[2].CommInitRank(3, id, 2, gpulib.Config{})
	require.NoError(t, err, "the last rank completes the communicator")
	for i, c := range []gpulib.Comm{c0, c2} {
		res, err := d[2*i].CommGetAsyncError(c)
		require.NoError(t, err)
		assert.Equal(t, gpulib.Success, res)
	}
	_, err = d[0].CommInitRank(3, id, 0, gpulib.Config{})
	assert.Equal(t, gpulib.SystemError, ncclCode(err), "a unique id serves one communicator")
}

func TestCommInitRankMisuse(t *testing.T) {
	tests := []struct {
		name  string
		setup func(w *World, id gpulib.UniqueID) error // an earlier call by another rank
		dev   int
		n     int
		id    func(gpulib.UniqueID) gpulib.UniqueID
		rank  int
		want  gpulib.Result
	}{
		{name: "nranks zero", dev: 0, n: 0, rank: 0, want: gpulib.InvalidArgument},
		{name: "rank out of range", dev: 0, n: 2, rank: 2, want: gpulib.InvalidArgument},
		{name: "negative rank", dev: 0, n: 2, rank: -1, want: gpulib.InvalidArgument},
		{name: "unknown id", dev: 0, n: 2, rank: 0, id: func(gpulib.UniqueID) gpulib.UniqueID { return gpulib.UniqueID{1} }, want: gpulib.SystemError},
		{name: "ranks disagree on nranks", dev: 1, n: 3, rank: 1, want: gpulib.InvalidUsage,
			setup: func(w *World, id gpulib.UniqueID) error { return initAsync(w, 0, 2, id, 0) }},
		{name: "rank joins twice", dev: 1, n: 2, rank: 0, want: gpulib.InvalidUsage,
			setup: func(w *World, id gpulib.UniqueID) error { return initAsync(w, 0, 2, id, 0) }},
		{name: "two ranks on one device", dev: 0, n: 2, rank: 1, want: gpulib.InvalidUsage,
			setup: func(w *World, id gpulib.UniqueID) error { return initAsync(w, 0, 2, id, 0) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, 2)
			d, _ := w.Driver(tt.dev)
			id, err := d.GetUniqueID()
			require.NoError(t, err)
			if tt.setup != nil {
				require.NoError(t, tt.setup(w, id))
			}
			if tt.id != nil {
				id = tt.id(id)
			}
			c, err := d.CommInitRank(tt.n, id, tt.rank, gpulib.Config{Blocking: true})
			assert.Zero(t, c)
			assert.Equal(t, tt.want, ncclCode(err), "%v", err)
		})
	}
}

// initAsync starts a non-blocking init on dev; InProgress is expected.
func initAsync(w *World, dev, n int, id gpulib.UniqueID, rank int) error {
	d, _ := w.Driver(dev)
	_, err := d.CommInitRank(n, id, rank, gpulib.Config{})
	if ncclCode(err) == gpulib.InProgress {
		return nil
	}
	return err
}

func TestCollectivesGiveExactResultsOnEveryWorldSize(t *testing.T) {
	const count = 37
	for _, n := range []int{1, 2, 3, 4, 8} {
		t.Run(fmt.Sprint("world", n), func(t *testing.T) {
			r := newRig(t, n)
			rng := rand.New(rand.NewPCG(uint64(n), 9))
			in := make([][]int32, n)
			for i := range in {
				in[i] = randInt32s(rng, count*n)
			}
			sum := make([]int32, count*n)
			for _, v := range in {
				for j := range sum {
					sum[j] += v[j] // wraps like ncclInt32
				}
			}
			send := r.alloc(t, uint64(4*count*n), func(i int) []byte { return int32s(in[i]) })
			recv := r.alloc(t, uint64(4*count*n), nil)

			// all-reduce out of place over the whole buffer
			r.each(t, func(i int) error {
				return r.d[i].AllReduce(send[i], recv[i], uint64(count*n), gpulib.Int32, gpulib.Sum, r.c[i], r.s[i])
			})
			r.sync(t)
			for i := range n {
				assert.Equal(t, int32s(sum), r.read(t, i, recv[i], uint64(4*count*n)), "all-reduce rank %d", i)
			}

			// reduce-scatter: rank i gets sum[i*count:(i+1)*count]
			r.each(t, func(i int) error {
				return r.d[i].ReduceScatter(send[i], recv[i], count, gpulib.Int32, gpulib.Sum, r.c[i], r.s[i])
			})
			r.sync(t)
			for i := range n {
				assert.Equal(t, int32s(sum[i*count:(i+1)*count]), r.read(t, i, recv[i], 4*count), "reduce-scatter rank %d", i)
			}

			// all-gather in place: rank i's contribution sits at offset i*count
			r.each(t, func(i int) error {
				return r.d[i].AllGather(send[i]+gpulib.Ptr(4*count*i), send[i], count, gpulib.Int32, r.c[i], r.s[i])
			})
			r.sync(t)
			var gathered []int32
			for i := range n {
				gathered = append(gathered, in[i][i*count:(i+1)*count]...)
			}
			for i := range n {
				assert.Equal(t, int32s(gathered), r.read(t, i, send[i], uint64(4*count*n)), "all-gather rank %d", i)
			}

			// broadcast in place from every root
			for root := range n {
				r.each(t, func(i int) error {
					return r.d[i].Broadcast(recv[i], recv[i], 3, gpulib.Int32, root, r.c[i], r.s[i])
				})
				r.sync(t)
				want := r.read(t, root, recv[root], 12)
				for i := range n {
					assert.Equal(t, want, r.read(t, i, recv[i], 12), "broadcast root %d rank %d", root, i)
				}
			}
		})
	}
}

// TestAllReduceEveryTypeWithExactValues sums small integers, exact in every type.
func TestAllReduceEveryTypeWithExactValues(t *testing.T) {
	const n, count = 3, 5
	r := newRig(t, n)
	encode := map[gpulib.DataType]func(int) uint64{
		gpulib.Int8: func(v int) uint64 { return uint64(uint8(v)) }, gpulib.Uint8: func(v int) uint64 { return uint64(v) },
		gpulib.Int32: func(v int) uint64 { return uint64(uint32(v)) }, gpulib.Uint32: func(v int) uint64 { return uint64(v) },
		gpulib.Int64: func(v int) uint64 { return uint64(v) }, gpulib.Uint64: func(v int) uint64 { return uint64(v) },
		gpulib.Float16:    func(v int) uint64 { return uint64(kernels.Float32ToF16(float32(v))) },
		gpulib.Float32:    func(v int) uint64 { return f32(float32(v)) },
		gpulib.Float64:    func(v int) uint64 { return math.Float64bits(float64(v)) },
		gpulib.Bfloat16:   func(v int) uint64 { return uint64(kernels.Float32ToBF16(float32(v))) },
		gpulib.Float8e4m3: func(v int) uint64 { return uint64(kernels.Float32ToE4M3(float32(v))) },
		gpulib.Float8e5m2: func(v int) uint64 { return uint64(kernels.Float32ToE5M2(float32(v))) },
	}
	for dt, enc := range encode {
		es := elemSize(dt)
		val := func(rank, i int) int { return (rank + i) % 3 } // 0..2: sums up to 6, exact everywhere
		bufs := r.alloc(t, uint64(es*count), func(rank int) []byte {
			b := make([]byte, es*count)
			for i := range count {
				store(b[i*es:], es, enc(val(rank, i)))
			}
			return b
		})
		r.each(t, func(i int) error {
			return r.d[i].AllReduce(bufs[i], bufs[i], count, dt, gpulib.Sum, r.c[i], r.s[i])
		})
		r.sync(t)
		want := make([]byte, es*count)
		for i := range count {
			s := 0
			for rank := range n {
				s += val(rank, i)
			}
			store(want[i*es:], es, enc(s))
		}
		for i := range n {
			assert.Equal(t, want, r.read(t, i, bufs[i], uint64(es*count)), "%s rank %d", dtypeName(dt), i)
		}
	}
}

func TestZeroCountCollectivesAreDiscarded(t *testing.T) {
	r := newRig(t, 2)
	// Only rank 0 calls: a zero-count all-reduce never needs its peer.
	require.NoError(t, r.d[0].AllReduce(0, 0, 0, gpulib.Bfloat16, gpulib.Sum, r.c[0], r.s[0]))
	within(t, 5*time.Second, func() { require.NoError(t, r.d[0].StreamSynchronize(r.s[0])) })
	// And it does not shift the matching of the next collective.
	bufs := r.alloc(t, 4, func(i int) []byte { return int32s([]int32{int32(i + 1)}) })
	r.each(t, func(i int) error {
		return r.d[i].AllReduce(bufs[i], bufs[i], 1, gpulib.Int32, gpulib.Sum, r.c[i], r.s[i])
	})
	r.sync(t)
	assert.Equal(t, int32s([]int32{3}), r.read(t, 1, bufs[1], 4))
}

func TestMismatchedCollectivesPutTheCommunicatorInAnErrorState(t *testing.T) {
	tests := []struct {
		name  string
		call1 func(d *Driver, p gpulib.Ptr, c gpulib.Comm, s gpulib.Stream) error // rank 1's call; rank 0 all-reduces 4 int32 with sum
	}{
		{"different operation", func(d *Driver, p gpulib.Ptr, c gpulib.Comm, s gpulib.Stream) error {
			return d.Broadcast(p, p, 4, gpulib.Int32, 0, c, s)
		}},
		{"different count", func(d *Driver, p gpulib.Ptr, c gpulib.Comm, s gpulib.Stream) error {
			return d.AllReduce(p, p, 3, gpulib.Int32, gpulib.Sum, c, s)
		}},
		{"different type", func(d *Driver, p gpulib.Ptr, c gpulib.Comm, s gpulib.Stream) error {
			return d.AllReduce(p, p, 4, gpulib.Uint32, gpulib.Sum, c, s)
		}},
		{"different reduction", func(d *Driver, p gpulib.Ptr, c gpulib.Comm, s gpulib.Stream) error {
			return d.AllReduce(p, p, 4, gpulib.Int32, gpulib.Max, c, s)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, 2)
			bufs := r.alloc(t, 16, nil)
			require.NoError(t, r.d[0].AllReduce(bufs[0], bufs[0], 4, gpulib.Int32, gpulib.Sum, r.c[0], r.s[0]))
			require.NoError(t, tt.call1(r.d[1], bufs[1], r.c[1], r.s[1]))
			r.sync(t) // the pending operations end instead of hanging
			for i := range 2 {
				res, err := r.d[i].CommGetAsyncError(r.c[i])
				require.NoError(t, err)
				assert.Equal(t, gpulib.InvalidUsage, res, "rank %d", i)
				err = r.d[i].AllReduce(bufs[i], bufs[i], 4, gpulib.Int32, gpulib.Sum, r.c[i], r.s[i])
				assert.Equal(t, gpulib.InvalidUsage, ncclCode(err))
				assert.Contains(t, err.Error(), "does not match across ranks")
			}
		})
	}
}

func TestBroadcastRootMismatchIsDetected(t *testing.T) {
	r := newRig(t, 3)
	bufs := r.alloc(t, 4, nil)
	r.each(t, func(i int) error {
		return r.d[i].Broadcast(bufs[i], bufs[i], 1, gpulib.Int32, min(i, 1), r.c[i], r.s[i])
	})
	r.sync(t)
	res, err := r.d[2].CommGetAsyncError(r.c[2])
	require.NoError(t, err)
	assert.Equal(t, gpulib.InvalidUsage, res)
}

func TestCollectiveArgumentErrorsLeaveTheCommunicatorUsable(t *testing.T) {
	r := newRig(t, 2)
	p, _ := r.w.Alloc(0, 16)
	other, _ := r.w.Alloc(1, 16)
	d, c, s := r.d[0], r.c[0], r.s[0]
	tests := []struct {
		name string
		call func() error
	}{
		{"invalid type", func() error { return d.AllReduce(p, p, 1, 12, gpulib.Sum, c, s) }},
		{"invalid reduction", func() error { return d.AllReduce(p, p, 1, gpulib.Int32, 5, c, s) }},
		{"root out of range", func() error { return d.Broadcast(p, p, 1, gpulib.Int32, 2, c, s) }},
		{"negative root", func() error { return d.Broadcast(p, p, 1, gpulib.Int32, -1, c, s) }},
		{"null buffer", func() error { return d.AllReduce(0, 0, 1, gpulib.Int32, gpulib.Sum, c, s) }},
		{"buffer too small", func() error { return d.AllReduce(p, p, 5, gpulib.Int32, gpulib.Sum, c, s) }},
		{"all-gather output too small", func() error { return d.AllGather(p, p, 3, gpulib.Int32, c, s) }},
		{"reduce-scatter input too small", func() error { return d.ReduceScatter(p, p, 3, gpulib.Int32, gpulib.Sum, c, s) }},
		{"buffer of another device", func() error { return d.AllReduce(other, other, 1, gpulib.Int32, gpulib.Sum, c, s) }},
		{"count overflows", func() error { return d.AllGather(p, p, 1<<62, gpulib.Int64, c, s) }},
		{"stream of another device", func() error { return d.AllReduce(p, p, 1, gpulib.Int32, gpulib.Sum, c, r.s[1]) }},
		{"communicator of another device", func() error { return d.AllReduce(p, p, 1, gpulib.Int32, gpulib.Sum, r.c[1], s) }},
		{"unknown communicator", func() error { return d.AllReduce(p, p, 1, gpulib.Int32, gpulib.Sum, 0x12345, s) }},
		{"send to a peer out of range", func() error { return d.Send(p, 1, gpulib.Int32, 2, c, s) }},
		{"recv of an invalid type", func() error { return d.Recv(p, 1, -1, 1, c, s) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			assert.Equal(t, gpulib.InvalidArgument, ncclCode(err), "%v", err)
		})
	}
	res, err := d.CommGetAsyncError(c)
	require.NoError(t, err)
	assert.Equal(t, gpulib.Success, res)
	bufs := r.alloc(t, 4, func(i int) []byte { return int32s([]int32{7}) })
	r.each(t, func(i int) error {
		return r.d[i].AllReduce(bufs[i], bufs[i], 1, gpulib.Int32, gpulib.Sum, r.c[i], r.s[i])
	})
	r.sync(t)
	assert.Equal(t, int32s([]int32{14}), r.read(t, 0, bufs[0], 4))
}
