package rendezvous

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors; test with errors.Is. Errors returned by the client wrap one of these
// (or a context error, or a net error) with what was being done and with which key.
var (
	// ErrClosed: the client or server was closed, or the client's connection was lost.
	// A client is not reconnected automatically; Dial again.
	ErrClosed = errors.New("closed")
	// ErrUnresponsive: the store sent nothing, not even a reply to a keepalive, for
	// three keepalive intervals (the idle timeout it announced, 60 s by default; at
	// least a second): a frozen process or a hung host. The client is then closed, and
	// the error also matches ErrClosed.
	ErrUnresponsive = errors.New("store unresponsive")
	// ErrUnauthorized: the token was missing or wrong on one side of the handshake.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrVersionMismatch: client and server speak different protocol versions.
	ErrVersionMismatch = errors.New("protocol version mismatch")
	// ErrBusy: the server is at its connection limit. Dial retries it until its context
	// ends.
	ErrBusy = errors.New("server busy")
	// ErrProtocol: the peer sent a frame that breaks the protocol (bad length, unknown
	// op, wrong number of fields, a field over its limit).
	ErrProtocol = errors.New("protocol violation")
	// ErrInvalidArgument: an empty or too long key, a too large value or request, a rank
	// outside [0, world), a world size below 1.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotCounter: Add on a key whose value is not a decimal int64, or an Add that
	// would overflow int64.
	ErrNotCounter = errors.New("not a counter")
	// ErrStoreFull: the server's memory budget (WithMaxStoreBytes) or the client's
	// share of it (WithMaxClientBytes) would be exceeded.
	ErrStoreFull = errors.New("store full")
	// ErrInvalidConfig: a configuration value (environment variable or option) is
	// missing or invalid; the error is a [*ConfigError].
	ErrInvalidConfig = errors.New("invalid configuration")
)

// ConfigError names the variable that is missing or invalid and its value. Its message
// reads `RANK="7": must be less than WORLD_SIZE (4)` or `MASTER_ADDR is not set`.
type ConfigError struct {
	// Var is the environment variable the setting comes from (also when it was given
	// through an option): "MASTER_ADDR", "RANK".
	Var string
	// Value is the value as given; empty when the variable is unset.
	Value string
	// Reason says what is wrong; empty when the variable is unset.
	Reason string
}

func (e *ConfigError) Error() string {
	if e.Reason == "" {
		return e.Var + " is not set"
	}
	return fmt.Sprintf("%s=%q: %s", e.Var, e.Value, e.Reason)
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// BarrierError reports a barrier that did not complete: which ranks never arrived, and
// why the wait ended (usually context.DeadlineExceeded, reachable with errors.Is).
type BarrierError struct {
	// Key is the barrier's key.
	Key string
	// World is the number of ranks the barrier waited for.
	World int
	// Missing lists, in ascending order, the ranks that never arrived. It is empty when
	// every rank arrived but the barrier still did not complete (a rank failed between
	// arriving and counting itself).
	Missing []int
	// Err is why the wait ended.
	Err error
}

func (e *BarrierError) Error() string {
	if len(e.Missing) == 0 {
		return fmt.Sprintf("barrier %q: all %d ranks arrived but the barrier did not complete: %v", e.Key, e.World, e.Err)
	}
	s := make([]string, len(e.Missing))
	for i, r := range e.Missing {
		s[i] = fmt.Sprint(r)
	}
	return fmt.Sprintf("barrier %q: %d of %d ranks missing: [%s]: %v", e.Key, len(e.Missing), e.World, strings.Join(s, " "), e.Err)
}

// Unwrap returns the reason the wait ended.
func (e *BarrierError) Unwrap() error { return e.Err }
