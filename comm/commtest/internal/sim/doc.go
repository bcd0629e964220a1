// Package sim is a GPU-free simulation of the CUDA driver and NCCL, as comm's NCCL backend
// sees them through gpulib.Driver: host-memory devices, ordered streams on goroutines,
// events, known kernels launched by name, and NCCL communicators whose ranks are
// goroutines of one process.
//
// A [World] holds the devices; [World.Driver] gives the gpulib.Driver bound to one of them
// (one rank). The simulation is strict the way the real libraries are: bad pointers,
// handles of another device, mismatched collectives, send/recv size mismatches and use
// after abort or destroy are errors (or, like on a GPU, hangs: an unmatched send never
// completes). Faults can be injected: a device dies, a communicator reports an
// asynchronous error, an operation never completes, a driver call fails.
//
// Every driver call is counted ([Driver.Calls]), so a test can prove that bad input
// never reached the library.
//
// Files: world.go (the world, options, faults), memory.go (device memory), stream.go
// (streams, events, kernels), comm.go (communicators: init, split, shrink, teardown),
// collective.go and p2p.go (operations and their matching), group.go, register.go
// (registration, ncclMemAlloc, windows), numeric.go (arithmetic), driver.go (the
// gpulib.Driver methods).
package sim
