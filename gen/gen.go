// Package gen holds the inputs of tools/bindgen: one JSON configuration per generated
// package (nccl.json, cuda.json, mpi.json), our own stand-in CUDA runtime headers (stub/), and the
// API snapshots it writes per header set (snapshot/). It has no code; `go generate ./...`
// (make generate) runs the generator from here.
package gen

//go:generate go run ../tools/bindgen generate nccl.json cuda.json mpi.json
//go:generate go run ../tools/bindgen history -o ../docs/nccl-api-history.md nccl.json
