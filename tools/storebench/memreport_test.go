package main

import (
	"os"
	"runtime"
	"runtime/debug"
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

// The bring-up's peak is read from a fresh high-water mark: resetPeakRSS lowers a
// process's VmHWM, raised by an earlier spike, to its present resident size.
func TestResetPeakRSSForgetsAnEarlierSpike(t *testing.T) {
	pid := os.Getpid()
	if statusKiB(pid, "VmHWM") == 0 {
		t.Skip("no VmHWM in /proc/self/status here (not Linux)")
	}
	spike := make([]byte, 64<<20)
	for i := range spike {
		spike[i] = 1
	}
	runtime.KeepAlive(spike)
	spike = nil
	debug.FreeOSMemory()
	high := statusKiB(pid, "VmHWM")
	if !resetPeakRSS(pid) {
		t.Skip("/proc/self/clear_refs cannot be written here (Linux before 4.0, or /proc read-only): storebench reports no bring-up peak")
	}
	after := statusKiB(pid, "VmHWM")
	if high-after < 32<<10 {
		t.Errorf("VmHWM %v KiB after the reset, %v before it: the 64 MiB spike is still counted", after, high)
	}
}
