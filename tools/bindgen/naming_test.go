package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestGoNameFollowsTheNamingRule(t *testing.T) {
	ncclPrefixes := []string{"NCCL_", "nccl"}
	cudaPrefixes := []string{"CUDA_", "CU_", "CU", "cu"}
	tests := []struct {
		cname    string
		prefixes []string
		want     string
	}{
		{"ncclAllReduce", ncclPrefixes, "AllReduce"},
		{"ncclComm_t", ncclPrefixes, "Comm"},
		{"ncclResult_t", ncclPrefixes, "Result"},
		{"ncclSuccess", ncclPrefixes, "Success"},
		{"ncclUniqueId", ncclPrefixes, "UniqueId"},
		{"NCCL_CONFIG_UNDEF_INT", ncclPrefixes, "ConfigUndefInt"},
		{"NCCL_API_MAGIC", ncclPrefixes, "ApiMagic"},
		{"ncclRedOp_dummy_t", ncclPrefixes, "RedOpDummy"},
		{"cudaStream_t", ncclPrefixes, "CudaStream"},
		{"cuMemAlloc", cudaPrefixes, "MemAlloc"},
		{"cuMemcpyHtoD_v2", cudaPrefixes, "MemcpyHtoDV2"},
		{"CUresult", cudaPrefixes, "Result"},
		{"CUdeviceptr", cudaPrefixes, "Deviceptr"},
		{"CUDA_ERROR_NO_DEVICE", cudaPrefixes, "ErrorNoDevice"},
		{"CU_STREAM_NON_BLOCKING", cudaPrefixes, "StreamNonBlocking"},
		{"CUdevice_attribute", cudaPrefixes, "DeviceAttribute"},
		{"CUDA_MEMCPY2D_v2", cudaPrefixes, "Memcpy2dV2"},
		{"cuuint64_t", cudaPrefixes, "Uint64"},
		{"CUDA_VERSION", cudaPrefixes, "Version"},
		{"plain", nil, "Plain"},
	}
	for _, tt := range tests {
		t.Run(tt.cname, func(t *testing.T) {
			assert.Equal(t, tt.want, goName(tt.cname, tt.prefixes))
		})
	}
}

func TestTagGoNameDropsTagSuffixes(t *testing.T) {
	p := []string{"CUDA_", "CU_", "CU", "cu"}
	tests := map[string]string{
		"CUstreamMemOpWaitValueParams_st": "StreamMemOpWaitValueParams",
		"CUlaunchAttributeValue_union":    "LaunchAttributeValue",
		"CUgraphNodeType_enum":            "GraphNodeType",
		"ncclConfig_v22800":               "NcclConfigV22800",
	}
	for tag, want := range tests {
		assert.Equal(t, want, tagGoName(tag, p), tag)
	}
}

func TestParamGoNameAvoidsKeywordsAndBodyNames(t *testing.T) {
	tests := []struct {
		name string
		i    int
		want string
	}{
		{"sendbuff", 0, "sendbuff"},
		{"Flags", 1, "flags"},
		{"ByteCount", 2, "byteCount"},
		{"FLAGS", 2, "flags"},
		{"type", 0, "typeArg"},
		{"func", 0, "funcArg"},
		{"err", 0, "errArg"},
		{"fp", 0, "fpArg"},
		{"len", 0, "lenArg"},
		{"", 3, "arg3"},
		{"", 12, "arg12"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, paramGoName(tt.name, tt.i), "%q", tt.name)
	}
}

func TestValidGoNameRejectsWhatCannotBeExported(t *testing.T) {
	assert.True(t, validGoName("AllReduce"))
	assert.False(t, validGoName("2dTexture"))
	assert.False(t, validGoName("lower"))
	assert.False(t, validGoName(""))
}
