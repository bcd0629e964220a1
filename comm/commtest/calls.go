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

// Submits returns how many whole groups rank's backend submitted (each outermost
// GroupEnd makes one submission of every operation recorded in its group).
func (c *Cluster) Submits(rank int) (int64, error) {
	if err := c.checkRank("submits", rank); err != nil {
		return 0, err
	}
	d, err := c.w.Driver(rank)
	if err != nil {
		return 0, err
	}
	return d.Submits(), nil
}
