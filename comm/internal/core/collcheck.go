package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The collective check (comm.MismatchError): before each collective, every rank
// contributes the fixed-size signature of its call to an all-gather on the same
// communicator and compares all of them, so that every rank reaches the same verdict.

// ErrMismatch reports collectives whose ranks did not call the same operation with the
// same counts, element type, root and reduction (the collective check's verdict).
var ErrMismatch = errors.New("collective mismatch")

// EnvCollCheck and EnvTorchDebug turn the collective check on for the communicators
// made without an explicit option: NCCLGO_COLL_CHECK=1, or
// TORCH_DISTRIBUTED_DEBUG=DETAIL as PyTorch reads it.
const (
	EnvCollCheck  = "NCCLGO_COLL_CHECK"
	EnvTorchDebug = "TORCH_DISTRIBUTED_DEBUG"
)

// CollCheckFromEnv reports whether the environment turns the collective check on:
// NCCLGO_COLL_CHECK a true value (strconv.ParseBool; it wins when set and not empty),
// or TORCH_DISTRIBUTED_DEBUG=DETAIL. A NCCLGO_COLL_CHECK that does not parse is an
// error naming it.
func CollCheckFromEnv() (bool, error) {
	if v := os.Getenv(EnvCollCheck); strings.TrimSpace(v) != "" {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return false, fmt.Errorf("%s=%q: want 1 or 0", EnvCollCheck, v)
		}
		return b, nil
	}
	return strings.EqualFold(strings.TrimSpace(os.Getenv(EnvTorchDebug)), "DETAIL"), nil
}

// SigBytes is the size of an encoded Signature.
const SigBytes = 40

// sigMagic marks an encoded signature (a rank that contributed none, or garbage, is
// told apart from one with another call).
const sigMagic uint32 = 0x4e474353 // "NGCS"

// Signature is what the collective check compares: one rank's call.
type Signature struct {
	// Seq is the number of the check on the communicator (1 for the first checked
	// collective): ranks that skipped or added a collective differ here.
	Seq uint64
	// Op is the operation's name ("all-reduce").
	Op string
	// Count is the element count (per rank where the operation has a part per rank,
	// as the call takes it), Type the element type (comm.DType's value; -1 none).
	Count int64
	Type  int32
	// Root is the root's rank for rooted operations, -1 otherwise; Reduce the
	// reduction (comm.ReduceOp's value), -1 for none.
	Root, Reduce int32
}

// sigOps numbers the operations a signature carries; the index is the code.
var sigOps = []string{"", OpAllReduce, OpAllGather, OpReduceScatter, OpBroadcast, OpReduce,
	OpAllToAll, OpAllToAllv, OpGather, OpScatter, OpBarrier, OpAllReduceInto, OpBroadcastInto}

func sigOpCode(op string) uint32 {
	for i, o := range sigOps {
		if o == op {
			return uint32(i)
		}
	}
	return 0
}

// Encode writes s into b (SigBytes long).
func (s Signature) Encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], sigMagic)
	binary.LittleEndian.PutUint32(b[4:], sigOpCode(s.Op))
	binary.LittleEndian.PutUint64(b[8:], s.Seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(s.Count))
	binary.LittleEndian.PutUint32(b[24:], uint32(s.Type))
	binary.LittleEndian.PutUint32(b[28:], uint32(s.Root))
	binary.LittleEndian.PutUint32(b[32:], uint32(s.Reduce))
	binary.LittleEndian.PutUint32(b[36:], ^sigMagic)
}

// decodeSig reads a signature from b; ok is false for bytes that are none.
func decodeSig(b []byte) (s Signature, ok bool) {
	if binary.LittleEndian.Uint32(b[0:]) != sigMagic || binary.LittleEndian.Uint32(b[36:]) != ^sigMagic {
		return Signature{}, false
	}
	code := binary.LittleEndian.Uint32(b[4:])
	if int(code) >= len(sigOps) || code == 0 {
		return Signature{}, false
	}
	return Signature{Op: sigOps[code], Seq: binary.LittleEndian.Uint64(b[8:]),
		Count: int64(binary.LittleEndian.Uint64(b[16:])), Type: int32(binary.LittleEndian.Uint32(b[24:])),
		Root: int32(binary.LittleEndian.Uint32(b[28:])), Reduce: int32(binary.LittleEndian.Uint32(b[32:]))}, true
}

// String is the call as the error shows it: "all-reduce #3 (count 1024, float32,
// sum)".
func (s Signature) String() string {
	var b strings.Builder
	b.WriteString(s.Op)
	b.WriteString(" #")
	b.WriteString(strconv.FormatUint(s.Seq, 10))
	b.WriteString(" (count ")
	b.WriteString(strconv.FormatInt(s.Count, 10))
	if s.Type >= 0 {
		b.WriteString(", ")
		b.WriteString(DType(s.Type).String())
	}
	if s.Root >= 0 {
		b.WriteString(", root " + strconv.Itoa(int(s.Root)))
	}
	if s.Reduce >= 0 {
		b.WriteString(", ")
		if int(s.Reduce) < len(opNames) {
			b.WriteString(opNames[s.Reduce])
		} else {
			b.WriteString("pre-mul-sum " + strconv.Itoa(int(s.Reduce)))
		}
	}
	b.WriteString(")")
	return b.String()
}

// MismatchError is the collective check's verdict when the ranks' calls differ: Rank
// called A, OtherRank called B (the lowest rank that differs from Rank, the lowest
// rank), and Ranks lists every rank whose call differs from Rank's. Every rank of the
// communicator returns the same error. It matches ErrMismatch.
type MismatchError struct {
	// Name is the communicator's name (may be empty), Op the operation this rank
	// called.
	Name string
	// Rank and OtherRank are ranks in the communicator; A and B their calls. B is the
	// zero Signature (Op "") when OtherRank contributed no valid signature.
	Rank, OtherRank int
	A, B            Signature
	// Ranks are the ranks whose calls differ from Rank's, in order.
	Ranks []int
}

func (e *MismatchError) Error() string {
	b := "no valid signature"
	if e.B.Op != "" {
		b = "called " + e.B.String()
	}
	where := ""
	if e.Name != "" {
		where = " on communicator " + strconv.Quote(e.Name)
	}
	return fmt.Sprintf("collective mismatch%s: rank %d called %s, rank %d %s (ranks that differ from rank %d: %v)",
		where, e.Rank, e.A.String(), e.OtherRank, b, e.Rank, e.Ranks)
}

// Is reports ErrMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// CompareSignatures reads the n signatures of all (SigBytes each, in rank order) and
// returns nil when they are all alike, else the MismatchError every rank derives from
// the same bytes.
func CompareSignatures(name string, all []byte, n int) error {
	if len(all) < n*SigBytes || n <= 0 {
		return fmt.Errorf("collective check: %d bytes for %d ranks", len(all), n)
	}
	first, ok0 := decodeSig(all[:SigBytes])
	var diff []int
	var other Signature
	for r := 1; r < n; r++ {
		s, ok := decodeSig(all[r*SigBytes:])
		if ok && ok0 && s == first {
			continue
		}
		if diff == nil {
			other = s
		}
		diff = append(diff, r)
	}
	if diff == nil && ok0 {
		return nil
	}
	if !ok0 { // rank 0 sent garbage: name it against rank 1
		s1, _ := decodeSig(all[SigBytes:])
		return &MismatchError{Name: name, Rank: 1, OtherRank: 0, A: s1, Ranks: []int{0}}
	}
	return &MismatchError{Name: name, Rank: 0, OtherRank: diff[0], A: first, B: other, Ranks: diff}
}
