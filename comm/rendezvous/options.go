package rendezvous

import (
	"log/slog"
	"time"
)

// Defaults of the server's limits.
const (
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultIdleTimeout      = 60 * time.Second
	DefaultMaxConns         = 1024
	DefaultMaxStoreBytes    = 1 << 30
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
	maxStoreBytes    int64
	torchClients     int8 // WithTorchClients: 1 allow, -1 refuse, 0 only without a token
}

type clientConfig struct {
	token string
	log   *slog.Logger
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
// peers that are not working clients are dropped. Negative disables it; zero keeps the
// default.
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

// WithMaxConns limits open connections (default 1024); a connection over the limit is
// told the server is busy and closed. Zero or negative keeps the default.
func WithMaxConns(n int) ServerOption {
	return serverOption(func(c *serverConfig) {
		if n > 0 {
			c.maxConns = n
		}
	})
}

// WithMaxStoreBytes limits the bytes of keys and values the server holds (default
// 1 GiB); a write over the limit fails with ErrStoreFull. Zero or negative keeps the
// default.
func WithMaxStoreBytes(n int64) ServerOption {
	return serverOption(func(c *serverConfig) {
		if n > 0 {
			c.maxStoreBytes = n
		}
	})
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
