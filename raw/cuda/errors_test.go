package cuda

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResultErrorIsTheResult(t *testing.T) {
	require.NoError(t, resultError(Success))
	for _, r := range []Result{ErrorInvalidValue, ErrorNoDevice, ErrorNotInitialized, Result(999)} {
		t.Run(r.Error(), func(t *testing.T) {
			err := resultError(r)
			require.Error(t, err)
			assert.ErrorIs(t, err, r)
			var got Result
			require.ErrorAs(t, err, &got)
			assert.Equal(t, r, got)
			assert.False(t, errors.Is(err, Success))
		})
	}
}

func TestResultErrorSuccessDoesNotAllocate(t *testing.T) {
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = resultError(Success) }))
}
