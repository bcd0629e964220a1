// Package guardtest holds the helpers that check a backend's fast paths against the
// guard's checks one by one (comm/nccl's and comm/mpi's tests).
package guardtest
