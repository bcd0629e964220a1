package comm

import "context"

// ownJob makes b hold a reference on its Job (Connect), dropped when b closes: the
// last step of its Close.
func (b *NCCL) ownJob() {
	m := b.c.cfg.job.member
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
