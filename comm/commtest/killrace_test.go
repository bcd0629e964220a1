package commtest_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/commtest"
)

// Kill and Revive from different goroutines, while the device's stream is busy, then
// work on the revived device: the revived device's first stream must not share
// synchronisation state with the Kill still waiting for the old streams (run with
// -race: it reported the revived device's first enqueue racing Kill's wait).
func TestKillAndReviveFromTwoGoroutinesDoNotRace(t *testing.T) {
	c, err := commtest.NewDevices(1)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	for i := range 30 { // the race needs Kill to find the stream running: repeat
		s, err := c.NewStream(0)
		require.NoError(t, err, "round %d", i)
		_, err = c.HoldStream(0, s) // Kill ends the hold
		require.NoError(t, err, "round %d", i)
		var wg sync.WaitGroup
		wg.Go(func() { require.NoError(t, c.Kill(0), "round %d", i) })
		wg.Go(func() {
			for c.Revive(0) != nil { // until Kill has marked the device dead
			}
			s, err := c.NewStream(0)
			require.NoError(t, err, "round %d", i)
			require.NoError(t, c.SyncStream(0, s), "round %d", i)
			p, err := c.Alloc(0, 8)
			require.NoError(t, err, "round %d", i)
			require.NoError(t, c.CopyAsync(0, p+4, p, 4, s), "round %d", i)
			require.NoError(t, c.SyncStream(0, s), "round %d", i)
		})
		wg.Wait()
	}
}
