package main

import (
	"os"
	"runtime/metrics"
	"strings"
	"testing"
)

// The memory report splits the resident size into anonymous memory and file pages,
// as /proc/PID/status gives them.
func TestStatusKiBReadsTheResidentMemory(t *testing.T) {
	const status = "Name:\tx\nVmRSS:\t   10240 kB\nRssAnon:\t    8192 kB\nRssFile:\t    2048 kB\nThreads:\t7\n"
	for field, want := range map[string]float64{"VmRSS": 10240, "RssAnon": 8192, "RssFile": 2048, "Threads": 7, "VmSwap": 0} {
		if got := parseStatusKiB(status, field); got != want {
			t.Errorf("%s: got %v, want %v", field, got, want)
		}
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc here")
	}
	pid := os.Getpid()
	rss, anon, file := statusKiB(pid, "VmRSS"), statusKiB(pid, "RssAnon"), statusKiB(pid, "RssFile")
	if rss <= 0 || anon <= 0 || file <= 0 || anon+file > rss+rss/4 {
		t.Errorf("this process: RSS %v KiB, anonymous %v, file %v", rss, anon, file)
	}
}

// goMemory reads where the Go runtime's memory is without collecting: a reading
// without forced collection stays one.
func TestGoMemoryCollectsNothing(t *testing.T) {
	cycles := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(cycles)
	before := cycles[0].Value.Uint64()
	report := goMemory()
	metrics.Read(cycles)
	if after := cycles[0].Value.Uint64(); after != before {
		t.Errorf("goMemory ran %d collections", after-before)
	}
	for _, want := range []string{"heap objects ", "heap free not released ", "stacks ", "goroutines "} {
		if !strings.Contains(report, want) {
			t.Errorf("the report %q does not give %q", report, strings.TrimSpace(want))
		}
	}
	if strings.HasPrefix(report, "heap objects 0 KiB") {
		t.Errorf("the report sees no heap: %q", report)
	}
}
