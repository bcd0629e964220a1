package commtest

// Calls returns how many times rank's backend called the C function call (a name of
// the simulator's CallNames: "ncclAlltoAll", "ncclSend", ...), counting failed calls.
func (c *Cluster) Calls(rank int, call string) (int64, error) {
	if err := c.checkRank("calls", rank); err != nil {
		return 0, err
	}
	d, err := c.w.Driver(rank)
	if err != nil {
		return 0, err
	}
	return d.Calls(call), nil
}
