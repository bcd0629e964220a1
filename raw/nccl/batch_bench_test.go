//go:build cgo

package nccl

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/ncclgo/ncclgo/raw/internal/cbench"
	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
)

// benchGroup records a group of n sends and receives on the NULL communicator (NCCL
// rejects each at once: there is no GPU) into b.
func benchGroup(b *Batch, n int) {
	_ = b.GroupStart()
	for i := range n {
		if i%2 == 0 {
			_ = b.Send(nil, 8, Float32, int32(i), 0, 0)
		} else {
			_ = b.Recv(nil, 8, Float32, int32(i), 0, 0)
		}
	}
	_ = b.GroupEnd()
}

// rawGroup makes the same group with one raw call (one crossing) per call.
func rawGroup(n int) {
	_ = GroupStart()
	for i := range n {
		if i%2 == 0 {
			_ = Send(nil, 8, Float32, int32(i), 0, 0)
		} else {
			_ = Recv(nil, 8, Float32, int32(i), 0, 0)
		}
	}
	_ = GroupEnd()
}

// BenchmarkBatchGroup measures a group of ops sends and receives (plus ncclGroupStart
// and ncclGroupEnd) with the real libnccl 2.29.7, recorded into a Batch and run in one
// crossing, against
//   - vs-raw: the same calls through the raw functions, one crossing each;
//   - vs-c: the same calls made by one C function (cbench.Group): the library's own time.
//
// Each reports both paths' ns per group and their ratio, from one alternating run
// (dltest.Compare); divide by ops+2 for the time per call. NCCL's rejection of each call
// (it formats its last-error text) is in every path.
func BenchmarkBatchGroup(b *testing.B) {
	loadForBench(b)
	start, _ := lib.Resolve(&_sym_ncclGroupStart)
	end, _ := lib.Resolve(&_sym_ncclGroupEnd)
	send, _ := lib.Resolve(&_sym_ncclSend)
	recv, _ := lib.Resolve(&_sym_ncclRecv)
	for _, ops := range []int{1, 8, 64, 128} {
		var batch Batch
		batchLoop := func(n int) {
			for range n {
				batch.Reset()
				benchGroup(&batch, ops)
				_ = batch.Run()
			}
		}
		b.Run("ops="+strconv.Itoa(ops)+"/vs-raw", func(b *testing.B) {
			// NCCL keeps the group state per thread: a raw group needs one thread.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			dltest.Compare(b, "batch", "raw", batchLoop, func(n int) {
				for range n {
					rawGroup(ops)
				}
			})
		})
		b.Run("ops="+strconv.Itoa(ops)+"/vs-c", func(b *testing.B) {
			b.ReportAllocs()
			dltest.Compare(b, "batch", "c", batchLoop, func(n int) {
				for range n {
					cbench.Group(start, end, send, recv, ops)
				}
			})
		})
	}
}

// BenchmarkBatchRecord measures recording alone: a group of 128 sends and receives into
// a Batch that has grown to it, per recorded call, against one bare cgo call
// (cbench.CallIntPtr on ncclGetVersion) in the same run.
func BenchmarkBatchRecord(b *testing.B) {
	fp := loadForBench(b)
	var batch Batch
	var v int32
	const ops = 128
	b.ReportAllocs()
	dltest.Compare(b, "record", "cgo", func(n int) {
		for done := 0; done < n; done += ops + 2 {
			batch.Reset()
			benchGroup(&batch, ops)
		}
	}, func(n int) {
		for range n {
			_ = cbench.CallIntPtr(fp, &v)
		}
	})
}
