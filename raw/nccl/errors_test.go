package nccl

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResultErrorOfEachResult(t *testing.T) {
	require.NoError(t, resultError(Success))
	for _, r := range []Result{UnhandledCudaError, SystemError, InternalError, InvalidArgument, InvalidUsage, RemoteError, InProgress} {
		t.Run(r.Error(), func(t *testing.T) {
			err := resultError(r)
			require.Error(t, err)
			assert.ErrorIs(t, err, r)
			var got Result
			require.ErrorAs(t, err, &got)
			assert.Equal(t, r, got)
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, r, e.Result)
			for _, other := range []Result{Success, NumResults} {
				assert.False(t, errors.Is(err, other))
			}
		})
	}
}

func TestErrorMessageAddsTheDetail(t *testing.T) {
	tests := []struct {
		name string
		err  *Error
		want string
	}{
		{"no detail", &Error{Result: SystemError}, SystemError.Error()},
		{"detail", &Error{Result: SystemError, Detail: "socket closed"}, SystemError.Error() + ": socket closed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.err.Error())
		})
	}
}

func TestResultErrorSuccessDoesNotAllocate(t *testing.T) {
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = resultError(Success) }))
}
