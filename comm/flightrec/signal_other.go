//go:build !unix

package flightrec

import "os"

// ending reports whether s asks the process to end: DumpOnSignal raises it again
// after the dump. Without Unix signals, os.Interrupt is the only one, and it cannot
// be raised again.
func ending(os.Signal) bool { return false }

// raise is not available without Unix signals.
func raise(os.Signal) error { return nil }
