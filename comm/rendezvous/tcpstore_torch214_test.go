package rendezvous

import (
	"bufio"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/ncclgo/ncclgo/comm/internal/torchtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// opAnswer is one operation of testdata/torch/ops.py and what the server answered.
type opAnswer struct{ op, answer string }

// runOps runs ops.py's client against addr and returns its answers, in order.
func runOps(t *testing.T, ctx context.Context, env torchtest.Env, dir, addr string) []opAnswer {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	out := pyRun(t, env.Command(ctx, filepath.Join(dir, "ops.py"), "client", host, port))
	var ops []opAnswer
	done := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if sc.Text() == "DONE" {
			done = true
		}
		if rest, ok := strings.CutPrefix(sc.Text(), "OP "); ok {
			op, answer, _ := strings.Cut(rest, "\t")
			ops = append(ops, opAnswer{op, answer})
		}
	}
	require.True(t, done, "ops.py against %s did not finish:\n%s", addr, out)
	return ops
}

// torch 2.14's client (Debian sid's python3-torch, legacy client: Debian builds it
// without libuv) calls every operation it has once against ncclgo's server and, in the
// same test, against torch 2.14's own server: every answer must be the same, op by op
// (set, get, add, compare_set, check, wait with and without timeout, num_keys,
// delete_key, append, multi_set, multi_get, has_extended_api, list_keys, a 4 MiB value
// under a raised limit, PrefixStore, the store's barrier and torch.distributed's
// store-based barrier; the queue operations, which this client refuses itself, are
// TestTorchQueues').
func TestTorch214ClientAnswersLikeTorchServer(t *testing.T) {
	env := torchtest.Require(t, torchtest.Torch214)
	dir := torchtest.Stage(t, filepath.Join("testdata", "torch", "ops.py"))
	ctx := ctxTimeout(t, 5*time.Minute)
	_, addr := startServer(t, WithMaxTorchValueBytes(8<<20))
	ours := runOps(t, ctx, env, dir, addr)
	// torch's own server: ops.py server.
	theirs := runOps(t, ctx, env, dir, servePy(t, env.Command(ctx, filepath.Join(dir, "ops.py"), "server")))

	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "op\ttorch %s server\tncclgo\t\n", env.Version)
	for i := range max(len(ours), len(theirs)) {
		var o, th opAnswer
		if i < len(ours) {
			o = ours[i]
		}
		if i < len(theirs) {
			th = theirs[i]
		}
		mark := ""
		if o != th {
			mark = "DIFFERENT"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", th.op, th.answer, o.answer, mark)
	}
	_ = tw.Flush()
	t.Logf("torch %s's client, op by op:\n%s", env.Version, table.String())
	require.Equal(t, len(theirs), len(ours), "operations run")
	for i := range theirs {
		assert.Equal(t, theirs[i], ours[i], "operation %d", i)
	}
	// The comparison is worth something only if the operations did what they should.
	answers := map[string]string{}
	for _, o := range ours {
		answers[o.op] = o.answer
	}
	assert.Equal(t, "b'1'", answers["get"])
	assert.Equal(t, "3", answers["add"])
	assert.Equal(t, "['a', 'ap', 'late', 'm1', 'm2', 'n']", answers["list_keys"])
	assert.Contains(t, answers["get of 4 MiB"], "4194304 bytes")
	assert.Equal(t, "None", answers["barrier of two"])
	assert.Contains(t, answers["barrier, timeout"], "barrier timeout")
	assert.Contains(t, answers["wait with timeout, absent"], "wait timeout")
}
