package kernels

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// buildHostEmu compiles testdata/hostemu.cpp (add.cu on the CPU) with g++
// against the cached CUDA 12.4 fp16/bf16 headers and libcu++'s <nv/target>,
// warnings as errors, and returns the program.
func buildHostEmu(t *testing.T) string {
	t.Helper()
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	cxx = lookTool(t, cxx, "g++")
	fp16 := cachedInput(t, "include", cudaFP16)
	nv := cachedInput(t, "include", libcudacxx)
	bin := filepath.Join(t.TempDir(), "hostemu")
	out, err := exec.Command(cxx, "-O1", "-std=c++14", "-Wall", "-Wextra", "-Werror",
		"-isystem", fp16, "-isystem", nv, "-o", bin, filepath.Join("testdata", "hostemu.cpp")).CombinedOutput()
	require.NoError(t, err, "building testdata/hostemu.cpp:\n%s", out)
	return bin
}

// emuJob is one launch for hostemu: dst and src are whole buffers (the
// emulator puts each at a 16-byte boundary), the kernel adds the n
// elements at src[soff:] into dst[doff:] on a grid of grid x block threads.
type emuJob struct {
	dst, src      []byte
	doff, soff, n int
	grid, block   int
}

// emulate runs jobs of kind k through hostemu and returns each job's dst
// buffer after the launch.
func emulate(t *testing.T, bin string, k Kind, jobs []emuJob) [][]byte {
	t.Helper()
	size, err := k.ElemSize()
	require.NoError(t, err)
	for i, j := range jobs {
		require.Len(t, j.src, len(j.dst), "job %d: dst and src buffers must have the same length", i)
	}
	cmd := exec.Command(bin, k.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() {
		// Small jobs go out in batches; big buffers straight from memory.
		// A write error means hostemu stopped reading: Wait reports why.
		w := bufio.NewWriterSize(stdin, 1<<16)
		for _, j := range jobs {
			var head [48]byte
			for i, v := range []int{j.doff, j.soff, j.n, len(j.dst) / size, j.grid, j.block} {
				binary.LittleEndian.PutUint64(head[8*i:], uint64(v))
			}
			for _, b := range [][]byte{head[:], j.dst, j.src} {
				if _, err := w.Write(b); err != nil {
					_ = stdin.Close()
					return
				}
			}
		}
		_ = w.Flush()
		_ = stdin.Close()
	}()
	got := make([][]byte, len(jobs))
	var readErr error
	for i, j := range jobs {
		got[i] = make([]byte, len(j.dst))
		if _, readErr = io.ReadFull(stdout, got[i]); readErr != nil {
			readErr = fmt.Errorf("reading the answer to job %d of %d: %w", i, len(jobs), readErr)
			break
		}
	}
	if readErr == nil {
		if n, _ := io.Copy(io.Discard, stdout); n != 0 {
			readErr = fmt.Errorf("hostemu wrote %d bytes more than its jobs' buffers", n)
		}
	}
	waitErr := cmd.Wait()
	require.NoError(t, waitErr, "hostemu %v:\n%s", k, stderr.String())
	require.NoError(t, readErr, "hostemu %v:\n%s", k, stderr.String())
	return got
}

// elemString formats element i of little-endian buffer b as hex bits.
func elemString(b []byte, size, i int) string {
	if i < 0 || (i+1)*size > len(b) {
		return "-"
	}
	if size == 2 {
		return fmt.Sprintf("%#04x", binary.LittleEndian.Uint16(b[2*i:]))
	}
	return fmt.Sprintf("%#08x", binary.LittleEndian.Uint32(b[4*i:]))
}

// requireSameElems fails t, naming the first differing elements and their
// operands, unless the emulated dst buffer got equals want.
func requireSameElems(t *testing.T, k Kind, what string, j emuJob, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	size, _ := k.ElemSize()
	bad := 0
	for i := 0; i < len(want)/size; i++ {
		if bytes.Equal(got[i*size:(i+1)*size], want[i*size:(i+1)*size]) {
			continue
		}
		if bad < 10 {
			where := "outside the range"
			if i >= j.doff && i < j.doff+j.n {
				where = fmt.Sprintf("%s + %s", elemString(j.dst, size, i), elemString(j.src, size, i-j.doff+j.soff))
			}
			t.Errorf("%s: %v element %d (%s): emulated kernel %s, reference %s",
				what, k, i, where, elemString(got, size, i), elemString(want, size, i))
		}
		bad++
	}
	require.Zero(t, bad, "%s: %d of %d elements differ", what, bad, len(want)/size)
}

// TestKernelHostEmulationMatchesReference runs add.cu on the CPU
// (testdata/hostemu.cpp, CUDA's host conversions standing in for the
// device's) and compares every result, bit for bit, with AddBF16, AddF16
// and AddF32:
//   - every element offset of dst and src within 16 bytes (same offsets:
//     scalar head, 16-byte vectors, scalar tail; different ones: scalar
//     only), lengths around the vector and block sizes, several grid
//     shapes; the elements around the range must stay as they were;
//   - bf16 and fp16: every 16-bit pattern added to every 257th pattern and
//     to every edge value in both orders, once through the vector path,
//     once with a head and tail, once through the scalar path;
//   - fp32: every pair of edge values (signed zeros, subnormals, ±inf, NaN
//     payloads, sums that overflow or tie at the top of the range), edge
//     values with random ones, random bit patterns, close values (rounding
//     and cancellation), tiny values and values near overflow, on the same
//     three paths.
//
// It needs g++ and the inputs `make kernel-inputs` caches; it skips without
// them, and fails instead when NCCLGO_STRICT is set (make test, CI).
func TestKernelHostEmulationMatchesReference(t *testing.T) {
	bin := buildHostEmu(t)
	t.Run("alignment", func(t *testing.T) { testHostEmuAlignment(t, bin) })
	t.Run("bf16", func(t *testing.T) {
		dst, src := pairs16(edgeBF16)
		testHostEmuSweep(t, bin, BF16, dst, src)
	})
	t.Run("fp16", func(t *testing.T) {
		dst, src := pairs16(edgeF16)
		testHostEmuSweep(t, bin, F16, dst, src)
	})
	t.Run("fp32", func(t *testing.T) {
		dst, src := pairsF32()
		testHostEmuSweep(t, bin, F32, dst, src)
	})
}

func testHostEmuAlignment(t *testing.T, bin string) {
	lengths := []int{0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 255, 256, 257, 2047, 2048, 2049, 4097, 10003}
	grids := [][2]int{{1, 1}, {1, 3}, {2, 4}, {1, 256}, {3, 256}, {40, 256}}
	for _, k := range Kinds() {
		rng := rand.New(rand.NewPCG(11, uint64(k)))
		var jobs []emuJob
		var wants [][]byte
		alignmentCases(t, k, lengths, rng, func(dst, src, want []byte, doff, soff, n int) bool {
			for _, g := range grids {
				jobs = append(jobs, emuJob{dst: dst, src: src, doff: doff, soff: soff, n: n, grid: g[0], block: g[1]})
				wants = append(wants, want)
			}
			return true
		})
		got := emulate(t, bin, k, jobs)
		for i, j := range jobs {
			requireSameElems(t, k, fmt.Sprintf("dst offset %d, src offset %d, n %d, grid %d x %d", j.doff, j.soff, j.n, j.grid, j.block),
				j, got[i], wants[i])
		}
	}
}

// pairs16 returns dst/src pairs of 16-bit patterns, little-endian: every
// pattern with every 257th pattern, and every pattern with every edge value
// in both orders.
func pairs16(edges []uint16) (dst, src []byte) {
	per := (1<<16+256)/257 + 2*len(edges)
	dst = make([]byte, 0, 2*per<<16)
	src = make([]byte, 0, 2*per<<16)
	for a := range 1 << 16 {
		for b := 0; b < 1<<16; b += 257 {
			dst = binary.LittleEndian.AppendUint16(dst, uint16(a))
			src = binary.LittleEndian.AppendUint16(src, uint16(b))
		}
		for _, e := range edges {
			dst = binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(dst, uint16(a)), e)
			src = binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(src, e), uint16(a))
		}
	}
	return dst, src
}

// pairsF32 returns dst/src pairs of float32 bit patterns.
func pairsF32() (dst, src []byte) {
	var d, s []uint32
	add := func(a, b uint32) { d, s = append(d, a), append(s, b) }
	for _, a := range edgeF32 {
		for _, b := range edgeF32 {
			add(a, b)
		}
	}
	rng := rand.New(rand.NewPCG(12, 13))
	for range 1 << 12 {
		r := rng.Uint32()
		for _, e := range edgeF32 {
			add(r, e)
			add(e, r)
		}
	}
	for range 1 << 18 {
		add(rng.Uint32(), rng.Uint32()) // any patterns: NaN payloads, infinities, subnormals
	}
	for range 1 << 18 {
		// Close magnitudes, either sign: rounding ties and cancellation.
		a := rng.Uint32()
		e := (a >> 23 & 0xff) + uint32(rng.IntN(5)) - 2
		b := rng.Uint32()&0x807fffff | (e&0xff)<<23
		add(a, b)
	}
	for range 1 << 16 {
		// Tiny values: subnormal and smallest normal exponents.
		add(rng.Uint32()&0x80ffffff, rng.Uint32()&0x80ffffff)
	}
	for range 1 << 16 {
		// Near the top of the range (exponents 252 to 254), mostly the same
		// sign: sums that overflow to infinity or round back to finite.
		sign := rng.Uint32() & 0x80000000
		a := sign | 254<<23 | rng.Uint32()&0x7fffff
		if rng.IntN(4) == 0 {
			sign ^= 0x80000000
		}
		add(a, sign|uint32(252+rng.IntN(3))<<23|rng.Uint32()&0x7fffff)
	}
	pack := func(v []uint32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], x)
		}
		return b
	}
	return pack(d), pack(s)
}

// testHostEmuSweep adds src into dst (n elements each) through the
// emulated kernel on three paths and compares with the reference.
func testHostEmuSweep(t *testing.T, bin string, k Kind, dst, src []byte) {
	size, _ := k.ElemSize()
	per := 16 / size
	rng := rand.New(rand.NewPCG(14, uint64(k)))
	// Each buffer holds the range between per random guard elements on each
	// side; a path's job sees it from the element before its offset on.
	guarded := func(b []byte) []byte {
		out := append(randomElems(rng, k, per), b...)
		return append(out, randomElems(rng, k, per)...)
	}
	dstBuf, srcBuf := guarded(dst), guarded(src)
	wantBuf := append([]byte(nil), dstBuf...)
	refAdd(t, k, wantBuf[per*size:per*size+len(dst)], src)
	for _, path := range []struct {
		name       string
		doff, soff int
	}{
		{"vector", 0, 0},             // same 16-byte alignment, no head
		{"head, vector, tail", 3, 3}, // same alignment, scalar head and tail
		{"scalar", 0, per - 1},       // different alignments
	} {
		t.Run(path.name, func(t *testing.T) {
			total := len(dst) + per*size // bytes of each job buffer
			from, sfrom := (per-path.doff)*size, (per-path.soff)*size
			j := emuJob{dst: dstBuf[from : from+total], src: srcBuf[sfrom : sfrom+total],
				doff: path.doff, soff: path.soff, n: len(dst) / size, grid: 40, block: BlockSize}
			got := emulate(t, bin, k, []emuJob{j})
			requireSameElems(t, k, path.name, j, got[0], wantBuf[from:from+total])
		})
	}
}
