// Package rendezvous is the TCP key-value store that the ranks of a job use to find
// each other: rank 0 (or tools/rendezvous) runs a Server, every rank Dials it, rank 0
// publishes the NCCL unique id under a key that is new for each communicator
// generation (GenerationKey), the others Get it with a context deadline, and Barrier
// tells a caller which ranks never arrived. Where the store is and who this process
// is come from torchrun's variables (FromEnv) or from options.
//
// The store carries bytes; it knows nothing of CUDA or NCCL.
//
// # Wire protocol (version 2)
//
// Everything on the wire is a frame: a 4-byte big-endian length n, then n bytes:
//
//	offset  size  field
//	0       1     op (below)
//	1       1     status: 0 ok, 1 failed, 2 unauthorized, 3 version mismatch,
//	              4 busy, 5 not a counter, 6 store full, 7 invalid (requests send 0)
//	2       4     request id, chosen by the client, echoed in the reply (0: handshake,
//	              keepalive)
//	6       2     field count c
//	8       ...   c fields, each a 4-byte big-endian length and that many bytes
//
// Limits, checked by both sides before anything is allocated: n at most MaxFrameLen
// (256 bytes until the handshake is done), every field at most MaxValueLen, keys 1 to
// MaxKeyLen bytes, at most MaxKeysPerRequest keys in a request. A frame that breaks a
// limit, is cut short, or does not parse closes that connection, with the reason
// logged; the server goes on serving everyone else. A failed reply has status != 0 and
// one field, the reason.
//
//	op  name      request fields             reply fields
//	1   hello     magic, version (u16),      magic, version, server nonce, server
//	              client nonce (32 bytes)    proof, idle timeout in ms (u32)
//	2   auth      client proof               (none)
//	3   set       key, value                 (none)
//	4   get       key                        value (sent once the key exists)
//	5   add       key, delta (i64)           new value (i64)
//	6   wait      key...                     (none; sent once all keys exist)
//	7   cas       key, [expected,] new       flags (1: swapped, 2: key exists), value
//	8   delete    key                        existed (1 byte)
//	9   check     key...                     one byte per key, 1 if it exists
//	10  cancel    (none; id of a get/wait/   no reply
//	              barrier)
//	11  ping      (none)                     (none)
//	12  barrier   key, rank (i64),           (none; sent once every rank in
//	              world (i64)                [0, world) has arrived)
//	13  barrier-  key                        flags (1: some rank arrived, 2: done),
//	    state                                world (i64), bitmap of the ranks arrived
//	14  arrive    done key, done value,      flags (1: closed before, 2: conflict,
//	              counter key, target (i64), 4: done), count (i64), conflict index
//	              n (i64), n pairs of key    (i64); with flag 4 also the done value,
//	              and value to create, keys  one byte per key to read (1: exists)
//	              to read                    and their values (sent once the done
//	                                         key exists, see Client.Arrive)
//
// A connection starts with hello. The server refuses other versions (status 3) and,
// at its connection limit, answers the first frame slot with busy (status 4) and
// closes. With a token configured the server sends a random 32-byte nonce; the proofs
// are HMAC-SHA256(token, label || client nonce || server nonce) with distinct labels
// for the two sides, so each side proves it knows the token without sending it, and
// both compare in constant time. Until auth succeeds no key can be read or written.
// The handshake must finish within the handshake timeout, and a connection that then
// sends nothing for the idle timeout is closed; clients send a ping every third of the
// idle timeout the server announced.
//
// Requests are pipelined: a client may send more before the replies come, and replies
// to blocked gets, waits and barriers arrive when they complete, in any order. Counters
// written by add are stored as decimal text. A frame that has begun must arrive whole
// within the handshake timeout.
//
// # What the store guarantees
//
// Barriers. Barrier returns only once every rank in [0, world) has arrived exactly
// once at that key. The server counts the ranks itself, apart from the keys: no Set,
// Add or Delete on any key can complete, block or break a barrier. A rank that arrives
// while the same rank already waits (two processes claiming one rank), a rank outside
// [0, world), a world other than the first arrival's, and an arrival at a completed
// barrier (a reused key) are errors (ErrInvalidArgument) naming the rank, given to the
// caller that made them; the others keep waiting. When the context ends first, the
// error is a [*BarrierError] listing the ranks that never arrived.
//
// A dead store. A store that was killed is seen at once (the connection breaks). A
// store that stops answering without closing (a stopped process, a hung host) is
// declared dead after three keepalive intervals without a byte from it: the client
// pings every third of the idle timeout the server announced (WithIdleTimeout, 60 s
// by default), so with the defaults a frozen store is seen within 60 s, never sooner
// than 3 s. Every pending and later call of that client then fails with an error
// matching ErrUnresponsive and ErrClosed that names the store's address and how long
// it was silent, whatever the calls' contexts. Dial retries until its context ends;
// when nothing ever listened at the address its error says so ("rank 0 never served
// the store at ADDR" with WithServedBy, as job.Connect does).
//
// Memory. The server has one memory budget (WithMaxStoreBytes, 1 GiB by default):
// keys and values with a fixed overhead per key, blocked requests and barriers with
// an overhead each, every authenticated connection (its state, and its goroutine and buffers while it is in use),
// and the buffers of requests being read, which grow with the bytes that arrived, not
// with the length a frame announces. At most a quarter of the budget may be in large
// frames being read at once; a connection may have 1,024 blocked requests holding at
// most 4 MiB, and the server 65,536. One client may hold at most its share of the
// budget (WithMaxClientBytes, an eighth by default), so one client cannot fill the
// store for the others. A client is a source host (an IPv4 address, an IPv6 /64), not a
// connection: every connection from it, of either protocol, draws on the same share, so
// a client with many connections gets no more than one with one. The token cannot be
// the unit (every rank proves the same one) and nothing a client declares can (it could
// declare many); ranks of one job on one host share their host's share, which their
// unique ids and barriers use little of. A store key outlives its writer, so its cost
// stays charged to the host that wrote it last after that host's connections close,
// until the key is deleted or another client overwrites it: a client that reconnects
// finds its share as full as it left it. Writers on many hosts could still fill the
// budget together, so part of it is kept for connections (WithMaxConns times 40 KiB,
// at most a quarter of the budget): each authenticated connection takes its cost and
// 16 KiB of room for its host's keys and blocked requests from there (a rank's
// bring-up uses about 10 KiB), and keys beyond their hosts' rooms share the rest. A
// rank that gets a connection slot thus has room for its bring-up whatever other
// writers have stored; what bounds the rooms is the connection slots
// (WithMaxConns, WithMaxHostConns). At the cap, the write that
// does not fit fails with ErrStoreFull ("store full") and changes nothing; a request
// too large for what is left is read, discarded and refused the same way; a blocked
// request over its bounds is refused; a new connection that does not fit is told the
// server is busy (Dial retries). One value waited for by many clients is written to
// each of them from the one copy the store holds. When load ends (what the budget
// counts has dropped by 16 MiB or more and stays put for half a second) the server
// returns the freed memory to the operating system. tools/rendezvous also sets the Go
// runtime's memory limit to the budget plus 32 MiB, so that its resident size stays
// under the budget plus 64 MiB; a server embedded in a larger process shares that
// process's runtime and limit.
//
// Fairness. A client (its source host, as for the shares) cannot slow the others
// down by keeping the server busy. Each request is handled in a turn; the turns go
// round robin between the clients waiting for one, and within a client between its
// connections, so a request waits for at most one request of each other client, however
// many connections or requests another client has. A turn covers the request's work on
// the store and the encoding of its reply, not the write: replies are written after
// it, those of pipelined requests together. While more than one client is active
// (within 100 ms), each may spend at most a tenth of every 10 ms in turns, reading and
// decoding its requests included; a client over that reads nothing more until the next
// 10 ms, and each connection's kernel receive buffer is 64 KiB, so a flood waits in the
// flooder's own socket. A client alone is never held back. A set visits only the
// waiters of its key, and registering or cancelling a wait costs a constant per key.
// torch connections write their answers as they handle a query, so they take no turn
// (a turn never waits on the network), but their time counts against the same quota.
//
// Idle connections. A connection past its handshake is served by a goroutine of its
// own while it is in use. Once it has sent nothing for 250 ms it is parked (in its
// first eight requests, at once after each while 64 others wait on goroutines for
// their clients: a bring-up holds a few dozen goroutines, not one per rank): the
// goroutine ends, its read buffers go back to a free list shared by all connections,
// and on Linux one epoll instance watches it (one goroutine for all parked
// connections). Bytes from the client wake it: the poller's goroutine serves the
// connections it finds woken, one after another (no goroutine started, no thread
// woken, even when every rank's request comes at once), and hands the poller, with
// the connections not served yet, to a new goroutine first if the connection must
// wait (for the rest of a request, for a write to drain, for its turn). Its idle timeout or its closing (Close, eviction, a
// failed write) start a goroutine for it. Replies to its blocked requests are written
// while it is parked, by the goroutine that completed them (the waits of torch clients
// that one key fires at once by at most 8 goroutines). Parked with no reply waiting to
// be written, a connection lets go of its Go connection and keeps its bare descriptor,
// read and written directly until a read or write would have to wait (it then becomes a
// Go connection again, an *os.File); a parked torch connection with no wait pending lets
// go of its torch state too. A new connection whose client has sent nothing yet waits
// for its first bytes the same way, without a goroutine, once 64 goroutines wait on
// their clients; it keeps its handshake slot and timeout. An idle rank thus costs its
// descriptor and about half a KiB of state, whatever the protocol, not a goroutine's
// stack, 8 KiB of buffers and Go's socket. Connections under TLS, and all connections
// off Linux, keep their goroutines while idle.
//
// Connections. Connections still in their handshake have slots of their own
// (WithMaxHandshakes, 64), apart from the authenticated ones (WithMaxConns, 1,024).
// Admission of a rank never depends on what others do from other addresses. A
// connection that has sent nothing while the handshake slots are all taken gets no
// slot: it waits in the lobby (on Linux), with no goroutine, until its first bytes
// arrive, for at most six handshake timeouts; the lobby holds up to four connections
// per WithMaxConns slot (at most half the descriptor limit), the oldest closed for a
// newcomer. So silent sockets neither hold the slots nor, closed and dialing again,
// keep the listener's queue full. When the handshake slots are all taken, a newcomer
// that has spoken takes the slot of the oldest connection
// that has sent nothing, or that the server has waited on for 100 ms in all (a hello
// and then nothing, a frame cut short, a byte now and then), among those that have
// held theirs for 100 ms; else, when another host holds at least two slots more than
// the newcomer's (or the newcomer's host holds none), the oldest slot of the host that
// holds the most. A host that holds as many as any other is refused at once (Dial
// dials again); one that holds every slot (its own burst of ranks) waits in a queue
// of the server's, so the listener never stops accepting. A client whose hello the
// server has yet to read or answer is never evicted as stalled, even while its
// connection's goroutine has not run (on Linux the server looks in the kernel's
// receive buffer). WithMaxHostConns (off by default) caps the connections of one
// source host, so that one host cannot take
// every slot. A panic while serving one connection closes that
// connection only and is logged with its stack; the store goes on serving the others.
// Repeated warnings are logged at most ten at once and then once a second per message,
// with the number suppressed.
//
// The token. With a token (WithToken, NCCLGO_TOKEN), a client that cannot prove it
// knows the token reads and writes no key, holds no authenticated slot, and learns
// nothing but the server's version and idle timeout; the proof never reveals the
// token. Every proof is checked and a correct one always accepted; failed ones are
// limited per client (source host: an IPv4 address, an IPv6 /64; ten at once, then
// five a second): a client over its limit gets every answer, right or wrong, 200 ms
// late, so it makes at most five guesses a second on each handshake slot it holds,
// and a correct rank behind the same address still gets in. The limiter tracks 4,096
// clients; the others share one limit. So the token must be long and random, not a
// word: NewToken and tools/rendezvous -new-token make 256-bit
// ones, and a server warns about a token under 16 bytes. The token does not hide the
// traffic: after the handshake keys and values cross the network as plaintext, and
// anyone on the path can read them, or alter them unless TLS is on. For stores that
// cross untrusted networks, WithTLS wraps every connection in TLS (crypto/tls, a
// certificate and key given by the user; tools/rendezvous -tls-cert and -tls-key).
// Without a token, anyone who reaches the port is a client.
//
// # PyTorch's TCPStore protocol
//
// The server also answers clients of PyTorch's TCPStore (torch.distributed.TCPStore of
// torch 1.x and 2.x, torchrun's workers) on the same port, telling them from ncclgo's
// clients by their first bytes, with the same keys: a torch key "/k" is the store's
// "k". TCPStoreClient is the Go client of such a store (torchrun's agent store, or a
// Python process's), and Store is what both clients implement. torch's protocol has
// no authentication: a server with a token refuses torch clients unless
// WithTorchClients(true) (comm.WithTorchClients for the store rank 0 serves). Its queries, for both generations, are described in
// tcpstore.go. Every query of torch 2.x up to 2.14 is served (torch 2.14's queues,
// LIST_KEYS and BARRIER included), and every query of torch 1.x but WATCH_KEY; an
// unknown query closes its connection and is logged once per server. A torch client's
// values are at most WithMaxTorchValueBytes (1 MiB by default).
//
// A torch connection is held to what the server's own are: it waits in a handshake
// slot (and may be evicted from it) until its first query has arrived whole, within
// the handshake timeout; it then takes an authenticated slot (WithMaxConns) and its
// connection's cost from the budget. Its keys, counters and blocked waits are charged
// to its own share of the budget like any client's, a write that does not fit closes
// the connection (torch's protocol has no error reply) and changes nothing, and a
// panic while serving it closes it alone. After its first query a torch connection is
// closed for idleness only when its slot is needed: torch's clients send no keepalive,
// so a newcomer that finds the connection slots (or its host's) full takes the slot of
// the torch connection idle the longest, if that is at least the idle timeout and it
// has no wait pending. torch's BARRIER
// (2.14) is a counter under a key; ncclgo's server adds a barrier query of ranks
// (tcpstore.go), which
// TCPStoreClient.Barrier uses once the server has said it serves it, so that its
// barriers are the server's own and meet Client.Barrier's. On torch's own server
// TCPStoreClient.Barrier is built from keys instead. Likewise TCPStoreClient.Arrive is
// Client.Arrive through an arrival query of ncclgo's server, so that comm's join over
// a TCPStore client of ncclgo's server is one request per rank, as over Client; torch's
// own server has none (ServesArrivals), and there comm joins call by call.
package rendezvous
