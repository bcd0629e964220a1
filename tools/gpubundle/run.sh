#!/usr/bin/env bash
# run.sh OUT: run the ncclgo GPU checks on a machine with a GPU (no Go toolchain needed)
# and write the results under OUT (at most 8 files):
#   env.txt        driver, GPU, library found, bundle manifest
#   ncclinfo.txt   tools/ncclinfo report
#   tests.txt      every GPU test binary, verbose, with a time limit per package
#   commbench.txt  all-reduce 8 B to 1 GiB through comm
#   summary.txt    one line per package: ok / FAIL / timeout
# Library: $NCCLGO_LIBNCCL if set, else the pip NCCL of the machine's python3 (or of
# $VIRTUAL_ENV), else the loader's own search.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: run.sh OUTDIR}"
mkdir -p "$out"
per_pkg="${NCCLGO_GPU_TEST_TIMEOUT:-150}"

if [ -z "${NCCLGO_LIBNCCL:-}" ]; then
	for py in "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python3}" python3; do
		[ -n "$py" ] && command -v "$py" >/dev/null || continue
		d="$("$py" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)" || continue
		if [ -f "$d/libnccl.so.2" ]; then export NCCLGO_LIBNCCL="$d/libnccl.so.2"; break; fi
	done
fi

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	cat "$here/MANIFEST"
	echo "NCCLGO_LIBNCCL=${NCCLGO_LIBNCCL:-<loader search>}"
	nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 || true
	env | grep -E '^(NCCL|NCCLGO|CUDA)_' || true
} >"$out/env.txt" 2>&1

if [ -x "$here/bin/ncclinfo" ]; then "$here/bin/ncclinfo" >"$out/ncclinfo.txt" 2>&1; fi

: >"$out/tests.txt"
: >"$out/summary.txt"
while read -r name pkg; do
	echo "=== $pkg" >>"$out/tests.txt"
	timeout "$per_pkg" "$here/tests/$name.test" -test.v -test.count=1 -test.timeout "$((per_pkg - 10))s" -test.run 'GPU' -test.bench 'GPU' -test.benchmem >>"$out/tests.txt" 2>&1
	rc=$?
	case $rc in 0) s=ok ;; 124) s=timeout ;; *) s="FAIL($rc)" ;; esac
	echo "$s $pkg" | tee -a "$out/summary.txt"
done <"$here/tests/packages.txt"

if [ -x "$here/bin/commbench" ]; then
	timeout 120 "$here/bin/commbench" -op allreduce -b 8 -e 1G -f 2 >"$out/commbench.txt" 2>&1 || echo "commbench exit $?" >>"$out/summary.txt"
fi
cat "$out/summary.txt"
