// Package goid identifies the calling goroutine for comm/nccl's group scope by the
// runtime's goroutine id: the number runtime.Stack prints ("goroutine 42 [running]"),
// which the runtime hands out in increasing order and never gives to another goroutine.
// (The address of the runtime's record of a goroutine is no such identity: the runtime
// reuses the records of goroutines that ended, so a group keyed by it could be inherited
// by an unrelated later goroutine.)
//
// ID reads the id with one load where the runtime's record of the calling goroutine can
// be reached from assembly (amd64, arm64): the offset of the id in that record is found
// once, at start-up, by comparing the record of a few goroutines with what
// runtime.Stack prints for them. Elsewhere, or when that comparison does not find one
// offset, ID parses runtime.Stack's first line on every call.
package goid

import (
	"runtime"
	"sync"
)

// ID returns the calling goroutine's id: never 0, and never the id of another
// goroutine, living or ended.
func ID() uint64 {
	if off := idOffset; off > 0 {
		return loadAt(off)
	}
	return parsed()
}

// parsed is the id runtime.Stack prints in its first line, "goroutine 42 [...".
func parsed() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const prefix = "goroutine "
	if len(b) < len(prefix) {
		return 0
	}
	var id uint64
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}

// idOffset is the offset of the id in the runtime's record of a goroutine, 0 when
// unknown (ID then parses runtime.Stack).
var idOffset = findOffset()

// maxOffset bounds the search: the id is a field near the start of the record.
const maxOffset = 320

// findOffset returns the one offset (a multiple of 8) at which the records of several
// goroutines hold their ids, or 0.
func findOffset() uintptr {
	if !fastPath {
		return 0
	}
	var candidates []uintptr
	probe := func() {
		id := parsed()
		var here []uintptr
		for off := uintptr(8); off < maxOffset; off += 8 {
			if loadAt(off) == id {
				here = append(here, off)
			}
		}
		if candidates == nil {
			candidates = here
			return
		}
		var both []uintptr
		for _, c := range candidates {
			for _, h := range here {
				if c == h {
					both = append(both, c)
				}
			}
		}
		candidates = both
	}
	probe()
	var wg sync.WaitGroup
	for range 4 { // goroutines with other, larger ids, one after the other
		wg.Add(1)
		go func() {
			defer wg.Done()
			probe()
		}()
		wg.Wait()
	}
	if len(candidates) != 1 {
		return 0
	}
	return candidates[0]
}
