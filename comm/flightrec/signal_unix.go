//go:build unix

package flightrec

import (
	"os"
	"syscall"
)

// ending reports whether s asks the process to end: DumpOnSignal raises it again
// after the dump.
func ending(s os.Signal) bool {
	switch s {
	case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT:
		return true
	}
	return false
}

// raise sends s to this process.
func raise(s os.Signal) error {
	n, ok := s.(syscall.Signal)
	if !ok {
		return syscall.EINVAL
	}
	return syscall.Kill(os.Getpid(), n)
}
