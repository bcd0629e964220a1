//go:build !cgo || !linux

package dl

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWithoutCgoEveryCallNeedsCgo(t *testing.T) {
	l := &Library{Name: "Fake", Sonames: []string{"libc.so.6"}, VersionSymbol: "x"}
	_, err := l.Resolve(&Symbol{Name: "printf"})
	require.ErrorIs(t, err, ErrNeedsCgo)
	assert.ErrorIs(t, l.Load(), ErrNeedsCgo)
	_, err = l.Version()
	assert.ErrorIs(t, err, ErrNeedsCgo)
	assert.ErrorIs(t, l.Info().Err, ErrNeedsCgo)
	assert.False(t, l.Loaded())
}
