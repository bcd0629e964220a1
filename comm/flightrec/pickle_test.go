package flightrec

import (
	"bytes"
	"context"
	"encoding/base64"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/testenv"
)

func strictEnv() bool { return os.Getenv("NCCLGO_STRICT") != "" }

// python runs a python3 program with stdin and returns its output, or skips the test
// when there is no python3 (fails under NCCLGO_STRICT).
func python(t *testing.T, prog string, stdin []byte) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if strictEnv() {
			t.Fatalf("NCCLGO_STRICT is set and python3 is missing: %v", err)
		}
		t.Skipf("python3 is missing: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", prog)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s%s", out, testenv.FailureExcerpt(string(out)))
	return strings.TrimSpace(string(out))
}

// What the writer encodes, Python's own pickle module reads as the same values:
// integers at every encoding boundary, strings beyond ASCII, nesting, None, booleans.
func TestPicklerWritesWhatPythonReads(t *testing.T) {
	ints := []int64{0, 1, 255, 256, 65535, 65536, -1, -128, -129, math.MaxInt32, math.MinInt32,
		math.MaxInt32 + 1, math.MinInt32 - 1, 1 << 40, -(1 << 40), 1796353556966243014, math.MaxInt64, math.MinInt64}
	var p pickler
	p.begin()
	p.dict()
	p.key("ints")
	p.list()
	for _, v := range ints {
		p.int(v)
	}
	p.endList()
	p.key("strs")
	p.list()
	p.str("")
	p.str("rang é ∑ 🚀")
	p.endList()
	p.key("misc")
	p.list()
	p.none()
	p.bool(true)
	p.bool(false)
	p.str("a")
	p.str("b")
	p.tuple2()
	p.endList()
	p.endDict()
	p.end()
	got := python(t, `
import pickle, sys
d = pickle.loads(sys.stdin.buffer.read())
print(repr(d["ints"])); print(ascii(d["strs"])); print(repr(d["misc"]))`, p.b)
	var want []string
	for _, v := range ints {
		want = append(want, strconv.FormatInt(v, 10))
	}
	assert.Equal(t, "["+strings.Join(want, ", ")+"]\n['', 'rang \\xe9 \\u2211 \\U0001f680']\n[None, True, False, ('a', 'b')]", got)
}

// What Python's pickle module writes, with every protocol from 2 to 5 (frames, memo,
// short strings), the reader reads.
func TestUnpicklerReadsWhatPythonWrites(t *testing.T) {
	out := python(t, `
import base64, pickle
shared = "shared-string"
v = {"version": "2.10", "n": [0, -1, 300, 70000, -70000, 2**40, -(2**62), 1.5],
     "t": ("a", shared, shared), "nested": {"x": [[1, 2], []], "y": None, "z": True},
     "big": ["s" * 300]}
for proto in (2, 3, 4, 5):
    print(base64.b64encode(pickle.dumps(v, protocol=proto)).decode())`, nil)
	lines := strings.Split(out, "\n")
	require.Len(t, lines, 4)
	for i, l := range lines {
		data, err := base64.StdEncoding.DecodeString(l)
		require.NoError(t, err)
		v, err := unpickle(data)
		require.NoError(t, err, "protocol %d", i+2)
		assert.Equal(t, map[any]any{
			"version": "2.10",
			"n":       []any{int64(0), int64(-1), int64(300), int64(70000), int64(-70000), int64(1 << 40), int64(-(1 << 62)), 1.5},
			"t":       Tuple{"a", "shared-string", "shared-string"},
			"nested":  map[any]any{"x": []any{[]any{int64(1), int64(2)}, []any{}}, "y": nil, "z": true},
			"big":     []any{strings.Repeat("s", 300)},
		}, v, "protocol %d", i+2)
	}
}
