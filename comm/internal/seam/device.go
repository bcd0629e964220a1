package seam

// DeviceOption returns a comm.Option (typed as any, like NewNCCL's options) that makes
// comm's bring-up (comm.Connect, comm.Job.NewNCCL) drive d instead of opening a CUDA
// device through the real libraries. Package comm sets it at init; comm/commtest uses
// it to run bring-up on its simulator.
var DeviceOption func(d Driver) any
