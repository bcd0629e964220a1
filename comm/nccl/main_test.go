package nccl

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain sends the flight recorder's dumps of failing tests to a directory of the
// run, not /tmp/nccl_trace_rank_N.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ncclgo-fr-")
	if err == nil && os.Getenv("NCCLGO_FR_DUMP_FILE") == "" {
		os.Setenv("NCCLGO_FR_DUMP_FILE", filepath.Join(dir, "nccl_trace_rank_"))
	}
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}
