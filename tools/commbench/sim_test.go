package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
)

func runCommbench(t *testing.T, open opener, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code = run(ctx, args, &out, &errOut, open)
	return out.String(), errOut.String(), code
}

func TestSimRunMarksEveryLineAndChecksEveryResult(t *testing.T) {
	out, errOut, code := runCommbench(t, openWorld, "-sim", "2", "-b", "8", "-e", "1K", "-f", "4", "-n", "2", "-op", "all", "-r", "-1")
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	rows := map[string]int{}
	coll := ""
	for _, l := range lines {
		require.True(t, strings.HasSuffix(l, "  SIMULATED"), "unmarked line %q", l)
		if name, ok := strings.CutPrefix(l, "# Collective test starting: "); ok {
			coll = strings.TrimSuffix(name, "  SIMULATED")
		}
		if strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		require.Len(t, f, 14, l) // 5 parameters, 2 x 4 measures, the mark
		rows[coll]++
		outWrong, inWrong := f[8], f[12]
		switch coll {
		case "alltoall":
			assert.Equal(t, "0", outWrong, l)
			assert.Equal(t, "N/A", inWrong, l)
		case "sendrecv":
			assert.Equal(t, "0", outWrong, l)
			assert.Equal(t, "N/A", inWrong, l)
		default:
			assert.Equal(t, "0", outWrong, l)
			assert.Equal(t, "0", inWrong, l)
		}
	}
	// Sizes 8, 32, 128, 512; the rooted collectives once per root.
	assert.Equal(t, map[string]int{"all_reduce": 4, "all_gather": 4, "reduce_scatter": 4, "broadcast": 8,
		"reduce": 8, "alltoall": 4, "gather": 8, "scatter": 8, "sendrecv": 4}, rows)
	assert.Equal(t, 9, strings.Count(out, "# Out of bounds values : 0 OK  SIMULATED\n"))
	assert.Equal(t, 9, strings.Count(out, "# Avg bus bandwidth    : "))
	assert.Contains(t, out, "#  Rank  1 Group  0 Pid")
	assert.NotContains(t, out, "Rank  2")
}

func TestSimJSONEveryTypeAndOperator(t *testing.T) {
	out, errOut, code := runCommbench(t, openWorld, "-sim", "3", "-b", "4", "-e", "512", "-f", "8", "-n", "1", "-w", "0",
		"-op", "all", "-dtype", "all", "-redop", "all", "-json")
	require.Equal(t, 0, code, errOut)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.True(t, rep.Simulated)
	assert.Equal(t, simNote, rep.Note)
	assert.Equal(t, 3, rep.Ranks)
	assert.Len(t, rep.Devices, 3)
	assert.Zero(t, rep.OutOfBounds)
	assert.Equal(t, int64(8), rep.Config.StepFactor)
	require.Len(t, rep.Collectives, 9)

	byName := map[string]collective{}
	for _, c := range collectives {
		byName[c.name] = c
	}
	perType := map[string]int{"all_reduce": 5 * 3, "reduce_scatter": 5 * 3, "all_gather": 3, "broadcast": 3, "sendrecv": 3, // ops x sizes 4, 32, 256
		"reduce": 5 * 3, "alltoall": 3, "gather": 3, "scatter": 3}
	for _, tbl := range rep.Collectives {
		c := byName[tbl.Collective]
		assert.Len(t, tbl.Rows, 12*perType[tbl.Collective], tbl.Collective)
		assert.Zero(t, tbl.OutOfBounds, tbl.Collective)
		for _, r := range tbl.Rows {
			name := fmt.Sprintf("%s %s %s %d", tbl.Collective, r.Type, r.RedOp, r.Size)
			var elem int64
			for _, ti := range typeInfo {
				if ti.name == r.Type {
					elem = int64(ti.t.Size())
				}
			}
			require.NotZero(t, elem, name)
			for _, form := range []struct {
				m       *measure
				inPlace bool
			}{{r.OutOfPlace, false}, {r.InPlace, true}} {
				if (!form.inPlace && !c.outOfPlace) || (form.inPlace && c.noInPlace) {
					assert.Nil(t, form.m, name)
					continue
				}
				require.NotNil(t, form.m, name)
				assert.Positive(t, form.m.TimeUS, name)
				alg, bus := c.bandwidth(r.Count, elem, 3, form.m.TimeUS/1e6)
				assert.InDelta(t, alg, form.m.AlgBW, 1e-9, name)
				assert.InDelta(t, bus, form.m.BusBW, 1e-9, name)
				if form.inPlace && c.uncheckedInPlace {
					assert.Nil(t, form.m.Wrong, name)
					continue
				}
				require.NotNil(t, form.m.Wrong, name)
				assert.Zero(t, *form.m.Wrong, name)
			}
		}
	}
}

// corrupt is a rank whose device reads come back with one element changed: the check
// must count it.
type corrupt struct{ rank }

func (c corrupt) Read(p comm.DevicePtr, n int64) ([]byte, error) {
	b, err := c.rank.Read(p, n)
	if len(b) > 0 {
		b[0] ^= 0x55
	}
	return b, err
}

func TestCheckCountsWrongElements(t *testing.T) {
	open := func(ctx context.Context, c config) (*world, error) {
		w, err := openSim(ctx, c.sim)
		if err == nil {
			w.ranks[1] = corrupt{w.ranks[1]}
		}
		return w, err
	}
	out, _, code := runCommbench(t, open, "-sim", "2", "-b", "64", "-e", "64", "-n", "1", "-op", "allgather", "-dtype", "int32")
	assert.Equal(t, 1, code, "wrong results fail the run")
	row := ""
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "#") && l != "" {
			row = l
		}
	}
	f := strings.Fields(row)
	require.Len(t, f, 14, row)
	assert.Equal(t, []string{"64", "8", "int32", "none", "-1"}, f[:5])
	assert.Equal(t, "1", f[8], "out-of-place: one element of rank 1 is wrong")
	assert.Equal(t, "1", f[12], "in-place: one element of rank 1 is wrong")
	assert.Contains(t, out, "# Out of bounds values : 2 FAILED  SIMULATED\n")

	out, _, code = runCommbench(t, open, "-sim", "2", "-b", "64", "-e", "64", "-n", "1", "-op", "allgather", "-c", "0")
	assert.Equal(t, 0, code, "-c 0 does not check")
	assert.Contains(t, out, "# Out of bounds values : 0 OK  SIMULATED\n")
}

func TestRunReportsFailures(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"bad flag", []string{"-op", "sum"}, 2, `commbench: usage: -op "sum": unknown collective`},
		{"root outside the world", []string{"-sim", "2", "-b", "8", "-e", "8", "-op", "broadcast", "-r", "5"}, 1,
			"commbench: broadcast: root 5 is not a rank of a world of 2"},
		{"help", []string{"-h"}, 0, "usage: commbench [flags]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := runCommbench(t, openWorld, tc.args...)
			assert.Equal(t, tc.code, code)
			assert.Contains(t, errOut, tc.err)
		})
	}
}

func TestRunStopsAtTheTimeout(t *testing.T) {
	open := func(ctx context.Context, c config) (*world, error) {
		<-ctx.Done() // a world that never comes up
		return nil, ctx.Err()
	}
	_, errOut, code := runCommbench(t, open, "-sim", "2", "-T", "50ms")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "commbench: context deadline exceeded")
}

func TestNoDeviceSaysToUseTheSimulator(t *testing.T) {
	w, err := openGPUs(context.Background(), 0)
	if err == nil {
		require.NoError(t, w.close())
		t.Skip("this machine has a GPU")
	}
	assert.Contains(t, err.Error(), "run with -sim N to measure the software layers on the simulator")
}
