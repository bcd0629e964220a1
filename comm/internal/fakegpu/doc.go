// Package fakegpu is a tiny gpulib.Driver for comm's own tests: it records the calls it
// gets and lets a test script NCCL's answers (in-progress polls, async errors, hanging
// streams, failing calls). It moves no data; comm/commtest's simulator does that.
package fakegpu
