package rendezvous

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A call whose reply arrived before the connection closed returns that reply: the
// rank whose arrival completes a barrier gets its answer even when another rank,
// released by the same arrival, closes the server at once (as the serving rank does
// when a job ends). Before, the server could close the connection between handling the
// arrival and writing its reply, and the client reported a close that came while the
// call was still finishing its write instead of the reply that had arrived.
func TestCallAnsweredBeforeTheServerClosedSucceeds(t *testing.T) {
	for i := range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		s := NewServer(WithLogger(discardLogger()))
		served := make(chan error, 1)
		go func() { served <- s.Serve(context.Background(), l) }()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		first, last := dial(t, l.Addr().String()), dial(t, l.Addr().String())
		key := "end/" + strconv.Itoa(i)
		closed := make(chan error, 1)
		go func() {
			err := first.Barrier(ctx, key, 0, 2)
			_ = s.Close()
			closed <- err
		}()
		require.Eventually(t, func() bool { return s.st.numPending() == 1 }, 10*time.Second, time.Millisecond, "the first rank waits at the barrier")
		require.NoError(t, last.Barrier(ctx, key, 1, 2), "iteration %d: the completing arrival lost its reply to Close", i)
		require.NoError(t, <-closed)
		require.NoError(t, <-served)
		cancel()
		_ = first.Close()
		_ = last.Close()
	}
}
