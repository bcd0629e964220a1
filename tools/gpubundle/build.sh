#!/usr/bin/env bash
# build.sh DIR: build, on this machine (no GPU needed), everything a GPU run needs into
# DIR (git-ignored): the gpu-tagged test binary of every package that has GPU tests, the
# ncclinfo and commbench binaries, the run script, and a manifest. Copy DIR to the GPU
# machine (or name it in the device tool's carry list) and run `DIR/run.sh OUT`.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:?usage: build.sh DIR}"
case "$out" in /*) ;; *) out="$root/$out" ;; esac
rm -rf "$out"
mkdir -p "$out/bin" "$out/tests"
cd "$root"

# Packages with at least one file constrained to the gpu tag.
mapfile -t pkgs < <(grep -rlE '^//go:build .*\bgpu\b' --include='*_test.go' . | xargs -r -n1 dirname | sort -u)
for p in "${pkgs[@]}"; do
	name="$(echo "${p#./}" | tr / _)"
	go test -c -tags gpu -o "$out/tests/$name.test" "$p"
	echo "$name $p" >>"$out/tests/packages.txt"
done
for t in ncclinfo commbench; do
	if [ -d "tools/$t" ]; then go build -o "$out/bin/$t" "./tools/$t"; fi
done
cp tools/gpubundle/run.sh "$out/run.sh"
chmod +x "$out/run.sh"
{
	echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
	echo "go: $(go version)"
	echo "test packages: ${#pkgs[@]}"
} >"$out/MANIFEST"
echo "gpu bundle in $out: ${#pkgs[@]} test binaries; run it with $out/run.sh OUTDIR" >&2
