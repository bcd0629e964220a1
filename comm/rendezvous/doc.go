// Package rendezvous is the TCP key-value store that the ranks of a job use to find
// each other: rank 0 (or tools/rendezvous) runs a Server, every rank Dials it, rank 0
// publishes the NCCL unique id under a key that is new for each communicator
// generation (GenerationKey), the others Get it with a context deadline, and Barrier
// tells a caller which ranks never arrived. Where the store is and who this process
// is come from torchrun's variables (FromEnv) or from options.
//
// The store carries bytes; it knows nothing of CUDA or NCCL.
//
// # Wire protocol (version 1)
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
//	10  cancel    (none; id of a get/wait)   no reply
//	11  ping      (none)                     (none)
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
// to blocked gets and waits arrive when their keys appear, in any order. Counters
// written by add are stored as decimal text.
//
// # PyTorch's TCPStore protocol
//
// The server also answers clients of PyTorch's TCPStore (torch.distributed.TCPStore of
// torch 1.x and 2.x, torchrun's workers) on the same port, telling them from ncclgo's
// clients by their first bytes, with the same keys: a torch key "/k" is the store's
// "k". TCPStoreClient is the Go client of such a store (torchrun's agent store, or a
// Python process's), and Store is what both clients implement. torch's protocol has
// no authentication: a server with a token refuses torch clients unless
// WithTorchClients(true). Its queries, for both generations, are described in
// tcpstore.go.
package rendezvous
