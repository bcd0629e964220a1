package main

import (
	"context"
	"fmt"
)

// openSim starts n simulated ranks. The simulator's exported cluster (comm/commtest) is
// not in this version yet.
func openSim(_ context.Context, n int) (*world, error) {
	return nil, fmt.Errorf("-sim %d: the simulator (comm/commtest) is not available in this version", n)
}
