//go:build unix

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// raiseFileLimit lets this process and the servers it starts open want files (sockets):
// the soft limit up to the hard one, and, where the process may (root), the hard one
// up to fs.nr_open.
func raiseFileLimit(want int) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	w := uint64(want)
	if lim.Max < w {
		if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
			if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
				raised := syscall.Rlimit{Cur: min(w, n), Max: min(w, n)}
				if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
					return
				}
			}
		}
	}
	lim.Cur = max(lim.Cur, min(w, lim.Max))
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < w {
		fmt.Fprintf(os.Stderr, "storebench: open files limited to %d, %d wanted: larger bring-ups may fail (raise ulimit -n)\n", lim.Cur, want)
	}
}
