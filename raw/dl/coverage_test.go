//go:build cgo

package dl

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCoverageReportsTheLoadErrorWhenNoLibraryLoads(t *testing.T) {
	l := &Library{Name: "X", Env: "NCCLGO_TEST_NO_SUCH_ENV", Sonames: []string{"libncclgo-does-not-exist.so.9"}}
	got, err := l.Coverage([]*Symbol{{Name: "f", Since: "1.0"}})
	require.ErrorIs(t, err, ErrLibraryNotFound)
	require.Nil(t, got)
}
