package kernels

import (
	"errors"
	"fmt"
)

// ErrLaunch reports launch arguments that cannot describe an add kernel
// launch: a negative count, an element size that does not divide 16, or a
// multiprocessor count below one.
var ErrLaunch = errors.New("invalid add kernel launch")

// Launch configuration of the add kernels. BlockSize must match
// NCCLGO_ADD_BLOCK and BlocksPerSM NCCLGO_ADD_MIN_BLOCKS_PER_SM in add.cu
// (a test checks the PTX's .maxntid and .minnctapersm): 6 blocks of 256
// threads are 1536 threads, every thread slot of an SM on compute
// capability 8.6, 8.7 and 8.9 and three quarters of one on 8.0 and 9.0
// (2048), enough loads in flight for a memory-bound kernel. A bound of 8
// blocks would exceed what 8.6, 8.7 and 8.9 hold: ptxas rejects it there
// (TestPTXAssemblesForEveryArchitectureFrom80).
const (
	BlockSize   = 256
	BlocksPerSM = 6
)

// vecBytes is the width of the kernels' vector loads and stores.
const vecBytes = 16

// LaunchDims returns the grid and block sizes for adding n elements of
// elemSize bytes on a GPU with multiprocessorCount SMs
// (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT). It gives one thread per
// 16-byte vector up to BlocksPerSM blocks per SM, beyond which the
// kernels' grid-stride loops take over; n == 0 still gives a launchable
// (1, BlockSize). Invalid arguments return an error wrapping ErrLaunch.
func LaunchDims(n, elemSize, multiprocessorCount int) (grid, block uint32, err error) {
	switch {
	case n < 0:
		return 0, 0, fmt.Errorf("launch dims: negative element count %d: %w", n, ErrLaunch)
	case elemSize <= 0 || elemSize > vecBytes || vecBytes%elemSize != 0:
		return 0, 0, fmt.Errorf("launch dims: element size %d does not divide %d bytes: %w", elemSize, vecBytes, ErrLaunch)
	case multiprocessorCount <= 0:
		return 0, 0, fmt.Errorf("launch dims: multiprocessor count %d is not positive: %w", multiprocessorCount, ErrLaunch)
	}
	perVec := vecBytes / elemSize
	vecs := n/perVec + min(n%perVec, 1) // no overflow for any int n
	blocks := vecs/BlockSize + min(vecs%BlockSize, 1)
	limit := multiprocessorCount * BlocksPerSM
	if multiprocessorCount > (1<<31-1)/BlocksPerSM {
		limit = 1<<31 - 1
	}
	return uint32(max(min(blocks, limit), 1)), BlockSize, nil
}
