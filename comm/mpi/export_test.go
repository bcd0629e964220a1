package mpi

// Offloads is how many blocking calls c made on its progress thread.
func Offloads(c *Communicator) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offloads
}
