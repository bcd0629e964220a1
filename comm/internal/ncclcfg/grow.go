package ncclcfg

import (
	"context"

	"github.com/ncclgo/ncclgo/comm"
)

// Grower is the optional part of a Member that lets the newcomers of a Grow find its
// unique id through the job's store (comm/job).
type Grower interface {
	// OfferGrow publishes id, the unique id of a Grow of this member's communicator to
	// world ranks, for the newcomers (ranks from from on) to read: the grow's root
	// calls it before its ncclCommGrow.
	OfferGrow(ctx context.Context, id comm.UniqueID, from, world int) error
	// Grown gives the backend of a Grow of this member's communicator (rank of world)
	// its own place in the job, and says whether that backend holds a reference on
	// the job (taken already).
	Grown(rank, world int) (m Member, owns bool)
}
