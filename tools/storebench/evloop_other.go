//go:build !linux

package main

// serveEvloop is Linux's only (epoll): see evloop_linux.go.
func serveEvloop(args []string) { fatalf("-evloop needs Linux (epoll)") }
