package comm

import "context"

// closing returns a context that is canceled when Close starts.
func (c *NCCLCommunicator) closing() context.Context {
	c.closeOnce.Do(func() { c.closeCtx, c.closeCancel = context.WithCancel(context.Background()) })
	return c.closeCtx
}

// cancelOnClose cancels the contexts of untilClose; Close calls it first.
func (c *NCCLCommunicator) cancelOnClose() {
	c.closing()
	c.closeCancel()
}

// untilClose returns ctx, also canceled when Close starts, so that a wait for other
// processes (AttemptReconnect's rendezvous) never holds Close up.
func (c *NCCLCommunicator) untilClose(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.closing(), cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}
