package rendezvous

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
)

// nonceLen is the size of each side's challenge.
const nonceLen = 32

// Labels keep the client's and the server's proofs distinct, so that neither can be
// replayed as the other.
const (
	clientLabel = "ncclgo-rendezvous client proof v1"
	serverLabel = "ncclgo-rendezvous server proof v1"
)

// proof is HMAC-SHA256(token, label || client nonce || server nonce). The token itself
// never crosses the wire.
func proof(token, label string, clientNonce, serverNonce []byte) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(label))
	m.Write(clientNonce)
	m.Write(serverNonce)
	return m.Sum(nil)
}

// validProof compares in constant time.
func validProof(got []byte, token, label string, clientNonce, serverNonce []byte) bool {
	return hmac.Equal(got, proof(token, label, clientNonce, serverNonce))
}

func newNonce() []byte {
	b := make([]byte, nonceLen)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error (Go 1.24+)
	return b
}

// NewToken returns a random 256-bit token (43 characters of unpadded base64url) for
// NCCLGO_TOKEN or WithToken. The token is what keeps strangers out of a store: it must
// be long and random, since whoever guesses it can read and write every key; failed
// guesses are rate-limited per source address but not impossible.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}
