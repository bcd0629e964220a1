package comm

import (
	"fmt"

	"github.com/ncclgo/ncclgo/comm/internal/seam"
)

// productionDriver returns the Driver over the real libraries for a device ordinal (-1:
// rank modulo the visible devices).
func productionDriver(device, rank int) (seam.Driver, error) {
	return nil, fmt.Errorf("%w: the NCCL/CUDA driver is not built into this version (device %d, rank %d)",
		ErrUnsupported, device, rank)
}
