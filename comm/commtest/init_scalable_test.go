package commtest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	testrequire "github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// sumOver all-reduces (rank+1) over bs (rank r on simulated device r) and checks
// every rank's sum.
func sumOver(t *testing.T, c *Cluster, bs []*nccl.Backend) {
	t.Helper()
	errs := make([]error, len(bs))
	var wg sync.WaitGroup
	for r, b := range bs {
		wg.Go(func() {
			p, err := c.Alloc(r, 4)
			if err == nil {
				err = c.WriteValues(r, p, comm.Float32, []float64{float64(r + 1)})
			}
			if err == nil {
				err = b.AllReduce(p, 4)
			}
			var v []float64
			if err == nil {
				v, err = c.ReadValues(r, p, comm.Float32, 1)
			}
			if want := float64(len(bs) * (len(bs) + 1) / 2); err == nil && v[0] != want {
				err = fmt.Errorf("sum %v, want %v", v[0], want)
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		testrequire.NoError(t, err, "rank %d", r)
	}
}

var quietLogger = slog.New(slog.DiscardHandler)

func closeAll(bs []*nccl.Backend) {
	for _, b := range bs {
		if b != nil {
			_ = b.Close()
		}
	}
}

func TestNewAllRunsOneRankPerDeviceOfTheProcess(t *testing.T) {
	c, err := NewDevices(3)
	testrequire.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := []nccl.Option{c.DevicesOption(), nccl.WithElementType(comm.Float32), nccl.WithLogger(quietLogger)}
	bs, err := nccl.NewAll(ctx, []int{0, 1, 2}, opts...)
	testrequire.NoError(t, err)
	defer closeAll(bs)
	for r, b := range bs {
		assert.Equal(t, r, b.Rank())
		assert.Equal(t, 3, b.WorldSize())
	}
	sumOver(t, c, bs)

	for _, bad := range [][]int{nil, {0, 0}, {1, -1}} {
		_, err := nccl.NewAll(ctx, bad, opts...)
		testrequire.Error(t, err, "%v", bad)
	}
	_, err = nccl.NewAll(ctx, []int{0, 1}, c.DevicesOption())
	testrequire.ErrorIs(t, err, comm.ErrInvalidType, "no element type")
}

func TestNewScalableInitialisesFromSeveralIDs(t *testing.T) {
	c, err := NewDevices(4)
	testrequire.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids := []comm.UniqueID{comm.UniqueID(c.w.NewUniqueID()), comm.UniqueID(c.w.NewUniqueID())}
	bs := make([]*nccl.Backend, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for r := range bs {
		wg.Go(func() {
			dev, err := c.DeviceOption(r)
			if err == nil {
				bs[r], err = nccl.NewScalable(ctx, ids, r, 4, dev, nccl.WithElementType(comm.Float32), nccl.WithLogger(quietLogger))
			}
			errs[r] = err
		})
	}
	wg.Wait()
	defer closeAll(bs)
	for r, err := range errs {
		testrequire.NoError(t, err, "rank %d", r)
	}
	sumOver(t, c, bs)
	n, err := c.Calls(0, "ncclCommInitRankScalable")
	testrequire.NoError(t, err)
	assert.Equal(t, int64(1), n)

	dev, err := c.DeviceOption(0)
	testrequire.NoError(t, err)
	for _, bad := range [][]comm.UniqueID{nil, make([]comm.UniqueID, 5), {{}}} {
		_, err := nccl.NewScalable(ctx, bad, 0, 4, dev, nccl.WithElementType(comm.Float32))
		testrequire.ErrorIs(t, err, comm.ErrInvalidSize, "%d ids", len(bad))
	}
}

func TestNewScalableNeedsNCCL2234(t *testing.T) {
	for _, v := range []int{21803, 22203} {
		c, err := NewDevices(1, WithNCCLVersion(v))
		testrequire.NoError(t, err)
		dev, err := c.DeviceOption(0)
		testrequire.NoError(t, err)
		_, err = nccl.NewScalable(context.Background(), []comm.UniqueID{comm.UniqueID(c.w.NewUniqueID())}, 0, 1, dev, nccl.WithElementType(comm.Float32))
		testrequire.ErrorIs(t, err, comm.ErrUnsupported)
		assert.Contains(t, err.Error(), "needs NCCL 2.23.4")
		testrequire.NoError(t, c.Close())
	}
}
