package comm

import (
	"github.com/ncclgo/ncclgo/comm/internal/rawdriver"
	"github.com/ncclgo/ncclgo/comm/internal/seam"
)

// productionDriver returns the Driver over the real libraries (loaded at run time) for a
// device ordinal (-1: rank modulo the visible devices).
func productionDriver(device, rank int) (seam.Driver, error) {
	return rawdriver.New(device, rank)
}

// productionUniqueID is ncclGetUniqueId on the real library.
var productionUniqueID = rawdriver.UniqueID
