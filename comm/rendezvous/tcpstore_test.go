package rendezvous

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/nettest"
)

// ncclgo's TCPStoreClient, speaking either generation, against ncclgo's server, which
// tells the generations and its own protocol apart on one port and shares the keys.
func TestTCPStoreClientAgainstServer(t *testing.T) {
	for _, p := range []TorchProtocol{TorchProtocol1, TorchProtocol2} {
		t.Run(torchName(p), func(t *testing.T) {
			noLeaks(t)
			srv, addr := startServer(t)
			ctx := ctxTimeout(t, 30*time.Second)
			tc, err := DialTCPStore(ctx, addr, WithTorchProtocol(p), WithLogger(discardLogger()))
			require.NoError(t, err)
			defer tc.Close()
			nc := dial(t, addr)

			require.NoError(t, nc.Set(ctx, "from-ncclgo", []byte("a")))
			v, err := tc.Get(ctx, "from-ncclgo")
			require.NoError(t, err)
			assert.Equal(t, "a", string(v))
			require.NoError(t, tc.Set(ctx, "from-torch", []byte("b")))
			v, err = nc.Get(ctx, "from-torch")
			require.NoError(t, err)
			assert.Equal(t, "b", string(v))

			n, err := tc.Add(ctx, "n", 3)
			require.NoError(t, err)
			assert.EqualValues(t, 3, n)
			n, err = nc.Add(ctx, "n", 4)
			require.NoError(t, err)
			assert.EqualValues(t, 7, n, "both protocols count in one decimal counter")

			cur, swapped, err := tc.CompareAndSet(ctx, "c", nil, []byte("x"))
			require.NoError(t, err)
			assert.True(t, swapped)
			assert.Equal(t, "x", string(cur))
			cur, swapped, err = tc.CompareAndSet(ctx, "c", nil, []byte("x"))
			require.NoError(t, err)
			assert.False(t, swapped, "a create of an existing key holding the same value")
			assert.Equal(t, "x", string(cur))
			cur, swapped, err = tc.CompareAndSet(ctx, "c", []byte("y"), []byte("z"))
			require.NoError(t, err)
			assert.False(t, swapped)
			assert.Equal(t, "x", string(cur))
			cur, swapped, err = tc.CompareAndSet(ctx, "c", []byte("x"), []byte("z"))
			require.NoError(t, err)
			assert.True(t, swapped)
			assert.Equal(t, "z", string(cur))

			present, err := tc.Check(ctx, "c", "absent", "n")
			require.NoError(t, err)
			assert.Equal(t, []bool{true, false, true}, present)
			ok, err := tc.Delete(ctx, "c")
			require.NoError(t, err)
			assert.True(t, ok)
			ok, err = tc.Delete(ctx, "c")
			require.NoError(t, err)
			assert.False(t, ok)

			// A blocked wait is answered when an ncclgo client sets the key.
			waited := make(chan error, 1)
			go func() { waited <- tc.Wait(ctx, "later", "from-ncclgo") }()
			go func() { _ = nc.Set(ctx, "later", []byte("1")) }()
			require.NoError(t, <-waited)

			// A wait whose context ends fails with its error; the client goes on.
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			err = tc.Wait(short, "never")
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			_, err = tc.Get(ctx, "later")
			require.NoError(t, err)

			// Barriers of ncclgo clients and torch clients meet: on ncclgo's server both
			// use its own barriers, with their checks.
			done := make(chan error, 1)
			go func() { done <- nc.Barrier(ctx, "b", 0, 2) }()
			require.NoError(t, tc.Barrier(ctx, "b", 1, 2))
			require.NoError(t, <-done)
			err = tc.Barrier(ctx, "b", 1, 2)
			require.ErrorIs(t, err, ErrInvalidArgument, "a reused barrier key")
			assert.Contains(t, err.Error(), "rank 1 arrived again after the barrier completed")
			require.NoError(t, tc.Set(ctx, "b2/done", []byte{1}), "keys cannot complete a barrier")
			go func() { done <- tc.Barrier(ctx, "b2", 0, 2) }()
			eventually(t, "rank 0 waits at b2", func() bool {
				_, arrived, _, found := srv.st.barrierState("b2")
				return found && arrived[0]
			})
			short, cancel = context.WithTimeout(ctx, 10*time.Second)
			err = tc.Barrier(short, "b2", 0, 2)
			cancel()
			require.ErrorIs(t, err, ErrInvalidArgument, "a duplicate rank")
			require.NoError(t, dial(t, addr).Barrier(ctx, "b2", 1, 2))
			require.NoError(t, <-done)

			// A barrier whose peers never come names them. Its deadline passes once
			// rank 0 has arrived, however slow the machine.
			lonely, expire := nettest.ExpiringContext()
			go func() { done <- tc.Barrier(lonely, "lonely", 0, 3) }()
			eventually(t, "rank 0 waits at lonely", func() bool {
				_, arrived, _, found := srv.st.barrierState("lonely")
				return found && arrived[0]
			})
			expire()
			err = <-done
			require.ErrorIs(t, err, context.DeadlineExceeded)
			var be *BarrierError
			require.True(t, errors.As(err, &be), "%v", err)
			assert.Equal(t, []int{1, 2}, be.Missing)
		})
	}
}

func torchName(p TorchProtocol) string {
	return map[TorchProtocol]string{1: "protocol1", 2: "protocol2"}[p]
}

// Detection picks generation 2 on ncclgo's server; with a token the server refuses
// torch clients unless allowed.
func TestTCPStoreClientDetectsAndIsRefusedWithToken(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	ctx := ctxTimeout(t, 30*time.Second)
	tc, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()))
	require.NoError(t, err)
	assert.Equal(t, TorchProtocol2, tc.Protocol())
	require.NoError(t, tc.Close())
	require.ErrorIs(t, tc.Set(ctx, "k", nil), ErrClosed)

	logs := &logBuffer{}
	_, addr = startServer(t, WithToken("secret"), WithLogger(logs.logger()))
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = DialTCPStore(short, addr, WithLogger(discardLogger()))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	eventually(t, "the refusal is logged", func() bool { return contains(logs.String(), "refusing a PyTorch TCPStore client") })

	_, addr = startServer(t, WithToken("secret"), WithTorchClients(true))
	tc, err = DialTCPStore(ctx, addr, WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, tc.Set(ctx, "k", []byte("v")))
	require.NoError(t, tc.Close())

	_, addr = startServer(t, WithTorchClients(false))
	short2, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	_, err = DialTCPStore(short2, addr, WithLogger(discardLogger()))
	require.ErrorIs(t, err, context.DeadlineExceeded, "refused without a token too")
}

// The server's reading of torch's queries refuses what breaks the limits before
// allocating, and closes only that connection.
func TestTorchQueryLimits(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	for name, req := range map[string][]byte{
		"key over the limit":     append([]byte{1, 0xCE, 0xF7, 0x85, 0x3C, 1}, le64(MaxKeyLen+2)...),
		"value of 2^63 bytes":    append(append([]byte{0, 0xCE, 0xF7, 0x85, 0x3C, 1}, le64(1)...), append([]byte("k"), le64(1<<63)...)...),
		"wait for 10^6 keys":     append([]byte{0, 0xCE, 0xF7, 0x85, 0x3C, 6}, le64(1_000_000)...),
		"watch key (protocol 1)": append([]byte{7}, le64(1)...),
		"bad magic":              {0, 1, 2, 3, 4},
	} {
		t.Run(name, func(t *testing.T) {
			r := rawDial(t, addr)
			_, _ = r.nc.Write(req)
			assert.True(t, r.closedByPeer())
		})
	}
	// The server still serves.
	ctx := ctxTimeout(t, 10*time.Second)
	require.NoError(t, dial(t, addr).Set(ctx, "k", nil))
}

func le64(v uint64) []byte {
	var w tsWriter
	w.u64(v)
	return w.bytes()
}
