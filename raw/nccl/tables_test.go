package nccl_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/nccl"
)

// ConfigFields is generated from the same model as Config: every row names a field of
// Config at the offset and with the size the table gives, in the struct's order, and
// the versions come from the header snapshots.
func TestConfigFieldsDescribeConfig(t *testing.T) {
	typ := reflect.TypeFor[nccl.Config]()
	require.Len(t, nccl.ConfigFields, typ.NumField())
	for i, f := range nccl.ConfigFields {
		sf := typ.Field(i)
		assert.Equal(t, sf.Name, f.Go, "row %d", i)
		assert.Equal(t, sf.Offset, f.Offset, f.C)
		assert.Equal(t, sf.Type.Size(), f.Size, f.C)
		assert.NotEmpty(t, f.Since, f.C)
	}
	byName := map[string]nccl.StructField{}
	for _, f := range nccl.ConfigFields {
		byName[f.C] = f
	}
	// Releases the NCCL changelogs give for these fields.
	for field, code := range map[string]int{"blocking": 21801, "trafficClass": 22602, "nvlsCTAs": 22703, "graphUsageMode": 22902} {
		assert.Equal(t, code, byName[field].SinceCode, field)
	}
	assert.Equal(t, "2.26.2", byName["trafficClass"].Since)
}

func TestResultNameIsTheCName(t *testing.T) {
	assert.Equal(t, "ncclSuccess", nccl.Success.Name())
	assert.Equal(t, "ncclRemoteError", nccl.RemoteError.Name())
	assert.Equal(t, "ncclTimeout", nccl.Timeout.Name())
	assert.Equal(t, "ncclResult_t(42)", nccl.Result(42).Name())
	assert.Equal(t, "ncclResult_t(-1)", nccl.Result(-1).Name())
}
