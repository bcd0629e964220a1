package dltest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A header set only GitHub or PyPI serves is never a prerequisite, even under
// NCCLGO_STRICT: OptionalHeader reports it absent without skipping or failing.
func TestOptionalHeaderDoesNotRequireHostsCICannotReach(t *testing.T) {
	t.Setenv("NCCLGO_CACHE", t.TempDir())
	t.Setenv(StrictEnv, "1")
	var github string
	for _, p := range Pins(t) {
		if p.Kind == "header" && optionalSources[p.Suite] {
			github = p.Set
		}
	}
	require.NotEmpty(t, github, "the manifest pins a github or pypi header set")
	dir, ok := OptionalHeader(t, github, "nccl.h")
	assert.False(t, ok)
	assert.Empty(t, dir)
}

func TestSnapshotCRebuildsTheNewestConfig(t *testing.T) {
	sets := PinnedSets(t, "header", "nccl-")
	c := SnapshotC(t, sets[len(sets)-1], "ncclConfig_t")
	assert.Contains(t, c, "typedef struct ncclConfig_v")
	assert.Contains(t, c, "\tconst char * netName;\n")
	assert.Contains(t, c, "_Static_assert(offsetof(ncclConfig_t, magic) == 8,")
	assert.Contains(t, c, "#define NCCL_CONFIG_INITIALIZER {")
}
