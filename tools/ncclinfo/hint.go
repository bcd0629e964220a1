package main

import (
	"path/filepath"
	"sort"
	"strings"
)

// hintLibrary is what ncclinfo suggests for one library that did not load.
type hintLibrary struct {
	env   string // the variable that names the file
	set   string // the cache's folder prefix under lib/ ("nccl-")
	file  string // the file in it
	fetch string // the command that fills the cache
	real  []string
}

var (
	ncclHint = hintLibrary{env: "NCCLGO_LIBNCCL", set: "nccl-", file: "libnccl.so.2", fetch: "make libs",
		real: []string{
			"on a machine with a GPU: pip install nvidia-nccl-cu12 (or -cu13) into the active Python environment (found automatically),",
			"  or install libnccl2 (NVIDIA's CUDA repository, or Debian contrib), or set NCCL_HOME or LD_LIBRARY_PATH to its folder",
		}}
	cudaHint = hintLibrary{env: "NCCLGO_LIBCUDA", set: "cuda-", file: "libcuda.so.1", fetch: "make libs",
		real: []string{
			"libcuda.so.1 comes with the NVIDIA driver (Debian: nvidia-driver / libcuda1 in non-free; NVIDIA: cuda-drivers);",
			"  in a container it needs the NVIDIA container toolkit (--gpus)",
		}}
)

// cacheDir applies ncclgo's one rule for its cache to an environment: $NCCLGO_CACHE,
// else $XDG_CACHE_HOME/ncclgo, else $HOME/.cache/ncclgo.
func cacheDir(env map[string]string) string {
	if d := env["NCCLGO_CACHE"]; d != "" {
		return d
	}
	if d := env["XDG_CACHE_HOME"]; d != "" {
		return filepath.Join(d, "ncclgo")
	}
	if h := env["HOME"]; h != "" {
		return filepath.Join(h, ".cache", "ncclgo")
	}
	return ""
}

// hint tells how to make a library load: the copies in ncclgo's cache (what `make libs`
// fetched for the tests) with the variable to set, and how to get it on a real machine.
func hint(h hintLibrary, environ []string, glob func(string) []string) []string {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	var out []string
	if dir := cacheDir(env); dir != "" && glob != nil {
		found := glob(filepath.Join(dir, "lib", h.set+"*", h.file))
		sort.Strings(found)
		if len(found) > 0 {
			out = append(out, "ncclgo's cache has the copies `"+h.fetch+"` fetched for the tests (no GPU needed); use one with:")
			for _, f := range found {
				out = append(out, "  "+h.env+"="+f)
			}
		} else {
			out = append(out, "ncclgo's cache ("+dir+") has none; `"+h.fetch+"` fetches the copies the tests load")
		}
	}
	return append(out, h.real...)
}
