package rendezvous

import (
	"time"
)

// lobbyTimeout is how long a connection may wait in the lobby: six handshake
// timeouts (a minute by default).
func (s *Server) lobbyTimeout() time.Duration { return 6 * s.cfg.handshakeTimeout }

// The lobby. While every handshake slot is taken, a new connection whose client has
// sent nothing yet gets no slot and no goroutine: it waits in the poller (park.go)
// for its first bytes, costing the server its socket only. Once it speaks it is
// admitted as if it had just arrived (Server.admit), and takes a slot from a silent
// or stalled one if need be. So sockets that stay silent neither hold the slots nor
// keep the listener's queue full by being closed and dialing again, and a client that
// speaks is read within moments whatever their number. The lobby holds at most
// lobbyCap connections (the oldest leaves for a newcomer) and each for at most
// lobbyTimeout: long, so that silent sockets closed at once do not come back at once
// and fill the listener's queue in front of the clients that speak.

// enterLobbyLocked puts c in the lobby and unlocks s.mu; it reports false, with s.mu
// still held, when c has already sent bytes or there is no poller.
func (s *Server) enterLobbyLocked(c *serverConn, id string) bool {
	if !pollSupported || bytesWaiting(c.raw) {
		return false
	}
	p := s.pollerLocked()
	if p == nil {
		return false
	}
	c.acct = &account{share: s.shareLocked(id)}
	c.since = time.Now()
	c.lobby = true
	s.conns[c] = struct{}{}
	s.wg.Add(1) // its goroutine's, once it has one (leaveLobby)
	s.lobby = append(s.lobby, c)
	s.lobbyN++
	var out *serverConn
	if s.lobbyN > lobbyCap(s.cfg.maxConns, s.cfg.maxUnauth) {
		out = s.popLobbyLocked()
	}
	c.parked.Store(true)
	s.mu.Unlock()
	if out != nil {
		out.evicted.Store(true)
		out.shut()
	}
	if !p.park(c) {
		c.wake() // it leaves the lobby at once
	} else if !c.parked.Load() {
		p.release(c) // woken before it was registered: leaveLobby may have released it first
	}
	return true
}

// popLobbyLocked takes the oldest connection out of the lobby and marks it dropped.
func (s *Server) popLobbyLocked() *serverConn {
	for len(s.lobby) > 0 {
		c := s.lobby[0]
		s.lobby[0] = nil
		s.lobby = s.lobby[1:]
		if c.lobby {
			c.lobby = false
			c.dropped = true
			s.lobbyN--
			return c
		}
	}
	return nil
}

// sweepLobby closes the connections that have waited in the lobby for lobbyTimeout.
func (s *Server) sweepLobby() {
	var out []*serverConn
	now := time.Now()
	s.mu.Lock()
	for len(s.lobby) > 0 {
		c := s.lobby[0]
		if c.lobby && now.Sub(c.since) < s.lobbyTimeout() {
			break
		}
		if c.lobby {
			out = append(out, s.popLobbyLocked())
		} else { // it left
			s.lobby[0] = nil
			s.lobby = s.lobby[1:]
		}
	}
	if len(s.lobby) > 2*s.lobbyN+64 { // compact what left from the middle
		kept := make([]*serverConn, 0, s.lobbyN)
		for _, c := range s.lobby {
			if c.lobby {
				kept = append(kept, c)
			}
		}
		s.lobby = kept
	}
	s.mu.Unlock()
	for _, c := range out {
		s.warn("rendezvous server: closing silent connection", "remote", c.remote, "stage", "lobby")
		c.shut()
	}
}

// leaveLobby runs when a connection in the lobby is woken: one that has spoken goes
// on as a new connection (Server.admit); one that hung up, or was dropped, closes.
func (s *Server) leaveLobby(c *serverConn) {
	defer s.wg.Done() // after admit's, if any: Close waits for both
	s.mu.Lock()
	p := s.poll
	s.mu.Unlock()
	if p != nil {
		p.release(c)
	}
	// Woken with nothing to read: its client hung up (or the socket failed); it
	// takes no one's slot.
	hungUp := !bytesWaiting(c.raw)
	s.mu.Lock()
	dropped := c.dropped || s.closed || hungUp
	if c.lobby {
		c.lobby = false
		s.lobbyN--
	}
	delete(s.conns, c)
	s.leaveLocked(c.acct.share)
	c.acct = nil
	s.mu.Unlock()
	if dropped {
		_ = c.raw.Close()
		return
	}
	s.admit(c, true)
}
