package flightrec_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ncclgo/ncclgo/comm/flightrec"
)

// Two ranks of a job record what a backend records; rank 1 never calls the third
// all-reduce. Each writes its dump, and Analyze names the rank and the operation.
func Example() {
	dir, _ := os.MkdirTemp("", "fr")
	defer os.RemoveAll(dir)
	for rank := range 2 {
		rec, _ := flightrec.New(flightrec.Config{Entries: 64, DumpFile: filepath.Join(dir, "nccl_trace_rank_")}, rank)
		world, _ := rec.Comm(flightrec.Group{Name: "0", Desc: "default_pg", Ranks: []int{0, 1}})
		for step := range 3 {
			if rank == 1 && step == 2 {
				break // rank 1 is stuck elsewhere
			}
			id := world.Record(flightrec.Call{Op: flightrec.AllReduce, In: 1024, Out: 1024, Type: flightrec.Float32})
			if step < 2 {
				world.Completed(id)
			}
		}
		_, _ = rec.WriteFile()
		_ = rec.Close()
	}
	traces, err := flightrec.ReadDir(dir, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = flightrec.Report(os.Stdout, flightrec.Analyze(traces))
	// Output:
	// communicator "0" (default_pg, ranks [0 1]): collective #3: missing ranks [1]
	//   ranks [0] called all_reduce in [[1024]] out [[1024]] Float
	//   rank 1 has nothing pending elsewhere (the cause)
	//   last completed: rank 0 #2 all_reduce; rank 1 #2 all_reduce;
}
