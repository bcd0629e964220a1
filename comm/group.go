package comm

// Grouper is the group part of Backend and Communicator: GroupStart opens a group on the
// calling goroutine, GroupEnd closes it and, at the outermost level, submits the
// operations issued in between.
type Grouper interface {
	GroupStart() error
	GroupEnd() error
}

// GroupDiscarder is the optional capability of a Grouper whose groups defer work (the
// NCCL types): DiscardGroup ends every level of the calling goroutine's group without
// submitting its operations. Discover it with a type assertion.
type GroupDiscarder interface {
	DiscardGroup() error
}

// InGroup runs f inside a group of g, on the calling goroutine: GroupStart, f, and
// GroupEnd, which submits every operation f issued (on any communicator of g's kind: on
// NCCL one cgo crossing for all of them) and, for blocking Backend collectives, waits
// for them. f must issue its operations from the calling goroutine.
//
// If f returns an error or panics, the group is discarded instead: nothing f issued is
// submitted (GroupDiscarder), so no rank is left waiting for half a group as long as
// every rank's f fails the same way, and the goroutine leaves no group open. InGroup then
// returns f's error (or lets the panic continue). Otherwise it returns GroupEnd's error.
// On NCCL, the discard inside an outer GroupStart level ends the outer levels too, and
// inside the function given to a Group's Add it discards that whole Group, whose Add
// and Submit then say so.
//
//	err := comm.InGroup(b, func() error {
//		return errors.Join(b.SendTo(send, n, peer, s), b.RecvFrom(recv, n, peer, s))
//	})
func InGroup(g Grouper, f func() error) error {
	if err := g.GroupStart(); err != nil {
		return err
	}
	submitted := false
	defer func() {
		if submitted {
			return
		}
		if d, ok := g.(GroupDiscarder); ok {
			_ = d.DiscardGroup()
		} else {
			_ = g.GroupEnd() // groups here only count levels: nothing was deferred
		}
	}()
	if err := f(); err != nil {
		return err
	}
	submitted = true
	return g.GroupEnd()
}

// Group is a group as a value, the form to prefer over GroupStart/GroupEnd: the
// operations that the functions given to Add issue, on any communicators and backends
// of one implementation, are added to it, and Submit launches them together (on NCCL in
// one cgo crossing); Discard drops them. Nothing joins a group but what Add's functions
// issue, and a group that is never submitted is discarded, never inherited. nccl.Group
// implements it (nccl.NewGroup, or NewGroup on an NCCL backend or communicator).
type Group interface {
	// Add runs f with the group open on the calling goroutine; f's operations are
	// checked at once and added to the group. After an error from f the group can only
	// be discarded (Submit does so and returns the error).
	Add(f func() error) error
	// Submit launches the group's operations and, for blocking Backend collectives,
	// waits for them. The group is empty afterwards, ready for the next batch.
	Submit() error
	// Discard empties the group without launching anything.
	Discard() error
}

// GroupMaker is the optional capability of a backend or communicator with group values
// (nccl.Backend, nccl.Communicator): NewGroup returns an empty Group whose operations
// are deferred to Submit.
type GroupMaker interface {
	NewGroup() Group
}

// NewGroup returns an empty Group for g's operations: g's own (GroupMaker) where it has
// one, as the NCCL types do. Elsewhere (Single, NoOp, Validate's wrapper, comm/mpi) groups
// only count levels and defer nothing, so the Group returned runs each function given to
// Add between GroupStart and GroupEnd at once (InGroup), and Submit and Discard have
// nothing left to do.
func NewGroup(g Grouper) Group {
	if m, ok := g.(GroupMaker); ok {
		return m.NewGroup()
	}
	return levelsGroup{g}
}

// levelsGroup is NewGroup's Group for a Grouper without group values.
type levelsGroup struct{ g Grouper }

func (l levelsGroup) Add(f func() error) error { return InGroup(l.g, f) }
func (levelsGroup) Submit() error              { return nil }
func (levelsGroup) Discard() error             { return nil }
