package nccl

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// cfgDriver is stubDriver reporting version v and recording the config of
// ncclCommInitRankConfig.
type cfgDriver struct {
	stubDriver
	v   int
	got *gpulib.Config
}

func (d cfgDriver) Version() (int, error) { return d.v, nil }
func (d cfgDriver) CommInitRank(n int, id gpulib.UniqueID, r int, cfg gpulib.Config) (gpulib.Comm, error) {
	*d.got = cfg
	return d.stubDriver.CommInitRank(n, id, r, cfg)
}

func TestNCCLConfigOptionsReachNCCL(t *testing.T) {
	var got gpulib.Config
	b, err := newNCCL(context.Background(), cfgDriver{v: 22907, got: &got}, comm.UniqueID{}, 0, 2, newConfig([]Option{bf16, quiet,
		WithBlocking(true), WithCGAClusterSize(4), WithCTAs(8, 16), WithNetName("Socket"), WithSplitShare(true),
		WithTrafficClass(106), WithName("tp"), WithConfigField("nvlsCTAs", 2), WithConfigField("graphUsageMode", 1)}))
	require.NoError(t, err)
	defer func() { _ = b.Close() }()
	assert.True(t, got.Blocking)
	assert.Equal(t, "Socket", got.NetName)
	assert.Equal(t, "tp", got.Name)
	assert.Equal(t, []gpulib.ConfigInt{{Name: "cgaClusterSize", Value: 4}, {Name: "minCTAs", Value: 8}, {Name: "maxCTAs", Value: 16}, {Name: "splitShare", Value: 1},
		{Name: "trafficClass", Value: 106}, {Name: "nvlsCTAs", Value: 2}, {Name: "graphUsageMode", Value: 1}}, got.Ints)
	raw, err := b.Communicator().RawComm()
	require.NoError(t, err)
	assert.NotZero(t, raw)
	require.NoError(t, b.Close())
	_, err = b.Communicator().RawComm()
	assert.ErrorIs(t, err, comm.ErrClosed)
}

func TestNCCLConfigOptionsTheLoadedNCCLLacksFail(t *testing.T) {
	tests := []struct {
		name    string
		version int
		opt     Option
		want    error
		msg     string
	}{
		{"trafficClass on 2.22.3", 22203, WithTrafficClass(1), comm.ErrUnsupported, "ncclConfig_t.trafficClass needs NCCL 2.26.2 (loaded 2.22.3)"},
		{"nvlsCTAs on 2.26.5", 22605, WithConfigField("nvlsCTAs", 1), comm.ErrUnsupported, "ncclConfig_t.nvlsCTAs needs NCCL 2.27.3 (loaded 2.26.5)"},
		{"graphUsageMode on 2.28.9", 22809, WithConfigField("graphUsageMode", 1), comm.ErrUnsupported, "needs NCCL 2.29.2"},
		{"splitShare on 2.17.1", 21701, WithSplitShare(true), comm.ErrUnsupported, "needs NCCL 2.18.1"}, // the oldest pinned header
		{"maxP2pPeers on 2.29.7", 22907, WithConfigField("maxP2pPeers", 4), comm.ErrUnsupported, "ncclConfig_t.maxP2pPeers needs NCCL 2.30.3 (loaded 2.29.7)"},
		{"graphStreamOrdering on 2.30.4", 23004, WithConfigField("graphStreamOrdering", 1), comm.ErrUnsupported, "needs NCCL 2.30.7"},
		{"unknown field", 22907, WithConfigField("noSuchField", 1), comm.ErrUnsupported, "not an int field"},
		{"pointer field by number", 22907, WithConfigField("commName", 1), comm.ErrUnsupported, "not an int field"},
		{"value outside int32", 22907, WithConfigField("minCTAs", 1<<40), comm.ErrInvalidSize, "outside int32"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got gpulib.Config
			_, err := newNCCL(context.Background(), cfgDriver{v: tc.version, got: &got}, comm.UniqueID{}, 0, 2, newConfig([]Option{bf16, quiet, tc.opt}))
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.msg)
			assert.Zero(t, got, "the config reached ncclCommInitRankConfig")
		})
	}
	var got gpulib.Config
	b, err := newNCCL(context.Background(), cfgDriver{v: 22203, got: &got}, comm.UniqueID{}, 0, 2, newConfig([]Option{bf16, quiet, WithCTAs(1, 4)}))
	require.NoError(t, err, "minCTAs and maxCTAs are in every supported NCCL")
	_ = b.Close()
}
