package rendezvous

import (
	"crypto/tls"
	"log/slog"
	"net"
	"time"
)

// Defaults of the server's limits.
const (
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultIdleTimeout      = 60 * time.Second
	DefaultMaxConns         = 1024
	DefaultMaxHandshakes    = 64
	DefaultMaxStoreBytes    = 1 << 30
	// DefaultClientShare: by default one client may hold at most 1/DefaultClientShare
	// of the server's memory budget (WithMaxClientBytes).
	DefaultClientShare = 8
	// minTokenLen is the shortest token the server accepts without a warning.
	minTokenLen = 16
	// writeTimeout bounds every write to a peer, so that a peer that stops reading
	// cannot stall the writer.
	writeTimeout = 10 * time.Second
)

// ServerOption configures a Server (NewServer).
type ServerOption interface{ applyServer(*serverConfig) }

// ClientOption configures a Client (Dial).
type ClientOption interface{ applyClient(*clientConfig) }

// ConfigOption overrides a setting that FromEnv would otherwise read from the
// environment.
type ConfigOption interface{ applyConfig(*Config) }

type serverConfig struct {
	token            string
	log              *slog.Logger
	handshakeTimeout time.Duration
	idleTimeout      time.Duration
	maxConns         int
	maxHostConns     int // 0: no limit per host
	maxUnauth        int
	maxStoreBytes    int64
	maxClientBytes   int64
	tls              *tls.Config
	onRequest        func(op, [][]byte) // for tests: runs before each request is handled
	// For tests: beforeServe runs first on each connection's goroutine (none parks
	// before it has run); onEvictCheck runs, with Server.mu held, each time a newcomer
	// finds the handshake slots full.
	beforeServe  func()
	onEvictCheck func(now time.Time, victim *serverConn)
	torchClients int8 // WithTorchClients: 1 allow, -1 refuse, 0 only without a token
	world        int  // WithWorld: the ranks of the job served; 0 unknown

	maxTorchValue int // WithMaxTorchValueBytes; 0: DefaultMaxTorchValueBytes
}

type clientConfig struct {
	token    string
	log      *slog.Logger
	tls      *tls.Config
	servedBy string
	// localAddr is the address dialled from (WithLocalAddr): the server tells
	// clients apart by their source host.
	localAddr net.Addr
}

type serverOption func(*serverConfig)

func (o serverOption) applyServer(c *serverConfig) { o(c) }

// TokenOption sets the shared secret; it configures a server, a client or a Config.
type TokenOption string

func (o TokenOption) applyServer(c *serverConfig) { c.token = string(o) }
func (o TokenOption) applyClient(c *clientConfig) { c.token = string(o) }
func (o TokenOption) applyConfig(c *Config)       { c.Token = string(o) }

// WithToken sets the shared secret. A server with a token refuses every client that
// cannot prove it knows the same token (HMAC-SHA256 challenge-response; the token is
// never sent). A client with a token refuses a server that cannot prove it either. An
// empty token turns authentication off. FromEnv reads it from NCCLGO_TOKEN.
func WithToken(token string) TokenOption { return TokenOption(token) }

// LoggerOption sets the logger of a server or client.
type LoggerOption struct{ l *slog.Logger }

func (o LoggerOption) applyServer(c *serverConfig) { c.log = o.l }
func (o LoggerOption) applyClient(c *clientConfig) { c.log = o.l }

// WithLogger sets where the server logs refused and dropped connections, and where the
// client logs retries (default slog.Default()). A nil logger keeps the default.
func WithLogger(l *slog.Logger) LoggerOption { return LoggerOption{l} }

// LocalAddrOption sets the local address a client dials from.
type LocalAddrOption struct{ a net.Addr }

func (o LocalAddrOption) applyClient(c *clientConfig)     { c.localAddr = o.a }
func (o LocalAddrOption) applyTCPStore(c *tcpStoreConfig) { c.localAddr = o.a }

// WithLocalAddr makes a client (Dial, DialTCPStore) dial from addr, a *net.TCPAddr
// whose port is usually 0: on a host with several interfaces it picks the one, and a
// benchmark spreads many clients over loopback addresses (127.0.0.x), each with its
// own range of ports. The server counts each source host as a client of its own.
// nil dials from wherever the system chooses.
func WithLocalAddr(addr net.Addr) LocalAddrOption { return LocalAddrOption{addr} }

// WithHandshakeTimeout bounds how long a new connection may take to say hello and
// authenticate (default 10 s). Zero or negative keeps the default.
func WithHandshakeTimeout(d time.Duration) ServerOption {
	return serverOption(func(c *serverConfig) {
		if d > 0 {
			c.handshakeTimeout = d
		}
	})
}

// WithIdleTimeout closes a connection that sends nothing for d (default 60 s). The
// server announces it in the handshake and clients send a keepalive every d/3, so only
// peers that are not working clients are dropped; a client declares the server dead
// when it has heard nothing from it for d (at least 3 s; 60 s when the server has no
// idle timeout). A PyTorch TCPStore client sends no keepalive: its connection is closed
// for idleness only when a newcomer needs its slot. Negative disables it; zero keeps
// the default.
func WithIdleTimeout(d time.Duration) ServerOption {
	return serverOption(func(c *serverConfig) {
		switch {
		case d < 0:
			c.idleTimeout = 0
		case d > 0:
			c.idleTimeout = d
		}
	})
}

// WithMaxConns limits authenticated connections (default 1024): a client that
// authenticates while the limit is reached is told the server is busy (Dial retries)
// and closed. Connections still in their handshake have slots of their own
// (WithMaxHandshakes), so clients that never authenticate cannot take these. Zero or
// negative keeps the default.
func WithMaxConns(n int) ServerOption {
	return serverOption(func(c *serverConfig) {
		if n > 0 {
			c.maxConns = n
		}
	})
}

// WithMaxHostConns limits the authenticated connections of one source host (default:
// no limit but WithMaxConns), so that one host cannot take every connection slot. A
// host is what WithMaxClientBytes calls a client: an IPv4 address, or an IPv6 /64.
// Size it for the most ranks one host runs, and their reconnections (two per rank:
// eight GPUs per node, 16; a whole job on one host, twice its world): a connection
// over it is told that its host is at its limit (Dial retries) and closed. Zero or
// negative means no limit.
func WithMaxHostConns(n int) ServerOption {
	return serverOption(func(c *serverConfig) { c.maxHostConns = max(n, 0) })
}

// WithMaxHandshakes limits connections that have not finished their handshake yet
// (default 64). When a new connection arrives with every such slot taken, it takes the
// slot of one that has sent nothing, or that the server has waited on for 100 ms in
// all, once that one has held its slot for 100 ms; else the oldest slot of the host
// holding the most, when that host holds at least two more than the newcomer's (or
// the newcomer's host holds none). A newcomer whose host holds as many as any other
// is refused (Dial dials again), and one whose host holds them all waits in the
// server's queue: what one host's connections do delays only that host's ranks. A
// client whose bytes the server has yet to read or answer is not evicted as stalled
// (on Linux the server looks in the kernel's receive buffer). Zero or negative keeps
// the default.
func WithMaxHandshakes(n int) ServerOption {
	return serverOption(func(c *serverConfig) {
		if n > 0 {
			c.maxUnauth = n
		}
	})
}

// WithMaxStoreBytes sets the server's memory budget (default 1 GiB): keys and values
// with a fixed overhead per key, blocked requests and barriers with an overhead each,
// connections and the buffers of the requests being read all reserve from it. A write
// that does not fit fails with ErrStoreFull ("store full"), a request too large for
// what is left is read, discarded and refused the same way, and a connection that
// does not fit is refused as busy. Part of it (WithMaxConns times 40 KiB, at most a
// quarter) is kept for connections: each authenticated one takes its cost and 16 KiB
// of room for its host's keys and blocked requests from there, so that writers that
// fill the rest leave every rank that gets a slot room for its bring-up. Zero or
// negative keeps the default.
func WithMaxStoreBytes(n int64) ServerOption {
	return serverOption(func(c *serverConfig) {
		if n > 0 {
			c.maxStoreBytes = n
		}
	})
}

// WithMaxClientBytes sets how much of the memory budget one client may hold: the keys
// it was the last to write, its blocked requests, its connections and its request
// buffers (default: an eighth of the budget, at least 1 MiB). A client is a source
// host, not a connection: all connections from one IPv4 address (or one IPv6 /64)
// share one share, whatever protocol they speak, so opening more connections gives a
// client no more. Over it, that client's writes fail with ErrStoreFull (and its new
// connections are refused as busy) while the others go on. Keys stay charged to the
// host that wrote them last after its connections close, until deleted or overwritten
// by another client, so reconnecting does not reset a quota. Zero or negative keeps
// the default.
func WithMaxClientBytes(n int64) ServerOption {
	return serverOption(func(c *serverConfig) {
		if n > 0 {
			c.maxClientBytes = n
		}
	})
}

// WithWorld tells the server the world size of the job it serves (comm's rank 0 and
// tools/rendezvous -world set it). A barrier arrival (Client.Barrier) for any other
// world is then refused to its caller alone, with an error wrapping
// ErrInvalidArgument, and creates nothing: no one can make a barrier key wait for a
// world of its choosing, or complete it early as a world of one, and so fail the
// job's ranks that arrive after. Zero or negative: the world is not known, and the
// first arrival at a key sets the world of its barrier.
func WithWorld(n int) ServerOption {
	return serverOption(func(c *serverConfig) { c.world = max(n, 0) })
}

// TLSOption protects a store's traffic with TLS; it configures a server or a client.
type TLSOption struct{ cfg *tls.Config }

func (o TLSOption) applyServer(c *serverConfig) { c.tls = o.cfg }
func (o TLSOption) applyClient(c *clientConfig) { c.tls = o.cfg }

// WithTLS makes a server speak TLS (cfg holds its certificate and key, e.g. from
// tls.LoadX509KeyPair) or a client (cfg holds the roots that verify the server's
// certificate; ServerName defaults to the host of the address dialled). Without it the
// traffic is plaintext: the token authenticates both sides but keys and values cross
// the network readable by anyone on the path. A nil cfg turns TLS off.
func WithTLS(cfg *tls.Config) TLSOption { return TLSOption{cfg} }

type clientOption func(*clientConfig)

func (o clientOption) applyClient(c *clientConfig) { o(c) }

// WithServedBy names who serves the store ("rank 0"), for Dial's error when no server
// ever answered at the address: "rank 0 never served the store at ADDR".
func WithServedBy(who string) ClientOption {
	return clientOption(func(c *clientConfig) { c.servedBy = who })
}

type configOption func(*Config)

func (o configOption) applyConfig(c *Config) { o(c) }

// WithMaster sets MASTER_ADDR and MASTER_PORT.
func WithMaster(addr string, port int) ConfigOption {
	return configOption(func(c *Config) { c.MasterAddr, c.MasterPort = addr, port })
}

// WithRank sets RANK and WORLD_SIZE.
func WithRank(rank, world int) ConfigOption {
	return configOption(func(c *Config) { c.Rank, c.WorldSize = rank, world })
}

// WithLocalRank sets LOCAL_RANK.
func WithLocalRank(local int) ConfigOption {
	return configOption(func(c *Config) { c.LocalRank = local })
}
