#!/usr/bin/env bash
# build.sh DIR: build, on this machine (no GPU needed), everything a GPU run needs into
# DIR (git-ignored): the gpu-tagged test binary of every package that has GPU tests, the
# ncclinfo, commbench, testreport and test2json binaries, the run script, and a manifest. Copy DIR to the GPU
# machine (or name it in the device tool's carry list) and run `DIR/run.sh OUT`.
# Binaries are stripped (-s -w) and the test binaries gzipped (tests/NAME.test.gz; run.sh
# unpacks each before its step) so that the bundle stays well under the device tool's
# 64 MiB carry limit: 64 MiB unpacked in 2026-12, 33 MiB packed. Every package is built even when one fails; the exit status is then 1 and
# the failures are listed.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:?usage: build.sh DIR}"
case "$out" in /*) ;; *) out="$root/$out" ;; esac
rm -rf "$out"
mkdir -p "$out/bin" "$out/tests"
cd "$root"
flags=(-trimpath -ldflags=-s\ -w)

# Packages with at least one test file constrained to the gpu tag, the lowest layers
# first so that a run cut short by its time budget has checked the foundations.
rank() { case "$1" in ./raw/*) echo 1 ;; ./kernels*) echo 2 ;; ./comm*) echo 3 ;; *) echo 4 ;; esac; }
mapfile -t pkgs < <(grep -rlE '^//go:build .*\bgpu\b' --include='*_test.go' . | xargs -r -n1 dirname | sort -u |
	while read -r p; do echo "$(rank "$p") $p"; done | sort -k1,1n -k2 | cut -d' ' -f2)
failed=()
: >"$out/tests/packages.txt"
for p in "${pkgs[@]}"; do
	name="$(echo "${p#./}" | tr / _)"
	if go test -c -tags gpu "${flags[@]}" -o "$out/tests/$name.test" "$p" && gzip -f "$out/tests/$name.test"; then
		echo "$name $p" >>"$out/tests/packages.txt"
	else
		failed+=("$p")
	fi
done
for t in ncclinfo commbench; do
	if [ -d "tools/$t" ]; then go build "${flags[@]}" -o "$out/bin/$t" "./tools/$t" || failed+=("./tools/$t (binary)"); fi
done
# testreport judges the run and writes record.md; it needs no cgo, so it runs anywhere. test2json (the go
# command's own, cmd/test2json) turns each test binary's output into the events testreport reads.
CGO_ENABLED=0 go build "${flags[@]}" -o "$out/bin/testreport" ./tools/testreport || failed+=("./tools/testreport (binary)")
CGO_ENABLED=0 go build "${flags[@]}" -o "$out/bin/test2json" cmd/test2json || failed+=("cmd/test2json (binary)")
cp tools/gpubundle/run.sh "$out/run.sh"
chmod +x "$out/run.sh"
{
	echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit: $(git rev-parse --verify -q HEAD || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (dirty)')"
	echo "go: $(go version)"
	echo "test packages: $(wc -l <"$out/tests/packages.txt") of ${#pkgs[@]}"
} >"$out/MANIFEST"
size=$(du -sm "$out" | cut -f1)
echo "gpu bundle in $out: $(wc -l <"$out/tests/packages.txt") test binaries, ${size} MiB; run it with $out/run.sh OUTDIR" >&2
if [ "$size" -gt 60 ]; then echo "warning: ${size} MiB is close to the device tool's 64 MiB carry limit" >&2; fi
if [ ${#failed[@]} -gt 0 ]; then
	printf 'did not build: %s\n' "${failed[@]}" >&2
	exit 1
fi
