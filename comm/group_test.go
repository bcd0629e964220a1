package comm_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
)

// TestNewGroupOnABackendWithoutGroupValues checks comm.NewGroup where groups only count
// levels (Single): Add runs its function inside a group at once and reports its error,
// the group leaves no level open, and Submit and Discard have nothing to do.
func TestNewGroupOnABackendWithoutGroupValues(t *testing.T) {
	s, err := comm.NewSingle(comm.WithElementType(comm.Float32))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	g := comm.NewGroup(s)
	ran := false
	require.NoError(t, g.Add(func() error { ran = true; return s.AllReduce(0x1000, 8) }))
	assert.True(t, ran)
	assert.ErrorIs(t, g.Add(func() error { return s.AllReduce(0x1000, 3) }), comm.ErrInvalidSize)
	require.NoError(t, g.Submit())
	require.NoError(t, g.Discard())
	assert.True(t, errors.Is(s.GroupEnd(), comm.ErrGroupNotOpen), "no level left open")
}
