// Package core holds what comm and its backend packages share: the types and errors that
// package comm re-exports (as aliases), and the guard, comm's one validation layer,
// which every backend calls before doing anything so that the same input fails the same
// way everywhere. It imports nothing else of the module and no cgo.
package core
