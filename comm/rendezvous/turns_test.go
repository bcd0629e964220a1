package rendezvous

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func turnConn(a *share) *serverConn {
	return &serverConn{acct: &account{share: a}, turn: make(chan struct{}, 1)}
}

// A client with many connections waiting gets one turn, then every other client
// waiting gets one, before its next connection's: a mutex would serve them in the
// order they came.
func TestTurnsGoRoundRobinBetweenClients(t *testing.T) {
	tu := &turns{epoch: time.Now(), free: 1}
	a, b := &share{id: "a"}, &share{id: "b"}
	holder := turnConn(a)
	tu.acquire(holder)
	conns := map[string]*serverConn{"a1": turnConn(a), "a2": turnConn(a), "a3": turnConn(a), "b1": turnConn(b)}
	got := make(chan string, len(conns))
	for i, name := range []string{"a1", "a2", "a3", "b1"} {
		go func() {
			tu.acquire(conns[name])
			got <- name
		}()
		eventually(t, name+" waits", func() bool {
			tu.mu.Lock()
			defer tu.mu.Unlock()
			return len(a.waiting)+len(b.waiting) == i+1
		})
	}
	var order []string
	prev := holder
	for range conns {
		tu.release(prev)
		select {
		case name := <-got:
			order = append(order, name)
			prev = conns[name]
		case <-time.After(30 * time.Second):
			t.Fatalf("no turn handed on after %v", order)
		}
	}
	tu.release(prev)
	assert.Equal(t, []string{"a1", "b1", "a2", "a3"}, order)
	assert.Equal(t, 1, tu.free)
	assert.Empty(t, tu.ring)
}

// A client that spent its quota of the window waits for the next window while
// another client is active, and not at all when it is alone.
func TestTurnsHoldBackAClientOverItsQuotaOnlyWhileOthersAreActive(t *testing.T) {
	tu := newTurns()
	a, b := &share{id: "a"}, &share{id: "b"}
	tu.mu.Lock()
	defer tu.mu.Unlock()
	now := tu.now()
	require.Zero(t, tu.holdBackLocked(a, now))
	a.spent = int64(turnQuota)
	assert.Zero(t, tu.holdBackLocked(a, now), "a client alone is never held back")

	assert.Zero(t, tu.holdBackLocked(b, now), "a client within its quota goes on")
	d := tu.holdBackLocked(a, now)
	assert.Positive(t, d, "over its quota while another client is active")
	assert.LessOrEqual(t, d, turnWindow)

	later := now + int64(turnContention) + int64(turnWindow)
	a.spent = int64(turnQuota)
	a.window = tu.window
	assert.Zero(t, tu.holdBackLocked(a, later), "a new window, and the other client has gone quiet")
}
