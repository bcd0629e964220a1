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
