package nccl

import (
	"context"

	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
)

// ownJob makes b hold a reference on its Job (Connect), dropped when b closes: the
// last step of its Close.
func (b *Backend) ownJob() {
	m := b.c.cfg.Job.Member
	if m == nil {
		return
	}
	m.Own()
	prev := b.c.onClose
	b.c.onClose = func(ctx context.Context, note func(string, error)) {
		if prev != nil {
			prev(ctx, note)
		}
		note("close job", m.Release())
	}
}

func init() {
	ncclcfg.MemberOf = func(b any) ncclcfg.Member { return b.(*Backend).c.cfg.Job.Member }
}
