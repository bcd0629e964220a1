#!/usr/bin/env bash
# run.sh OUT: run the ncclgo GPU checks on a machine with a GPU (no Go toolchain needed)
# and write the results under OUT (6 files; docs/gpu.md describes them):
#   env.txt        date, bundle manifest, nvidia-smi, the libnccl used, NCCL/CUDA variables
#   ncclinfo.txt   tools/ncclinfo's report: libraries found, GPUs, binding coverage
#   tests.txt      every GPU test and benchmark of every package, verbose
#   commbench.txt  all-reduce 8 B to 1 GiB through comm
#   summary.txt    one line per package (ok, FAIL, timeout, skipped, not run: with counts
#                  and the first skip reason), then every benchmark line
#   record.md      the entry for docs/gpu-results.md, filled in from the above
# Library: $NCCLGO_LIBNCCL if set, else the pip NCCL of $VIRTUAL_ENV's or the PATH's
# python3, else the first nvidia/nccl/lib/libnccl.so.2 found on disk, else the loader's
# own search. Time: at most $NCCLGO_GPU_TEST_TIMEOUT s per package (default 150) and
# $NCCLGO_GPU_BUDGET s in all (default 540, under the device tool's 600 s per command);
# packages that no longer fit are reported "not run".
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: run.sh OUTDIR}"
mkdir -p "$out"
per_pkg="${NCCLGO_GPU_TEST_TIMEOUT:-150}"
budget="${NCCLGO_GPU_BUDGET:-540}"
bench_s=90 # kept for commbench
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"

find_nccl() {
	local py d
	for py in "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python3}" python3; do
		[ -n "$py" ] && command -v "$py" >/dev/null || continue
		d="$("$py" -c 'import glob, nvidia.nccl as m; print(*[f for p in m.__path__ for f in glob.glob(p + "/**/libnccl.so.2", recursive=True)][:1])' 2>/dev/null)"
		if [ -n "$d" ] && [ -f "$d" ]; then echo "$d"; return; fi
	done
	timeout 30 find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o \
		-name libnccl.so.2 -path '*nvidia*' -print -quit 2>/dev/null
}
if [ -z "${NCCLGO_LIBNCCL:-}" ]; then
	lib="$(find_nccl)"
	if [ -n "$lib" ]; then export NCCLGO_LIBNCCL="$lib"; fi
fi

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "host: $(uname -srm)"
	cat "$here/MANIFEST"
	echo "NCCLGO_LIBNCCL=${NCCLGO_LIBNCCL:-<loader search>}"
	if command -v nvidia-smi >/dev/null; then
		nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,pci.bus_id --format=csv 2>&1
		nvidia-smi 2>&1 | grep -m1 'CUDA Version'
	else
		echo "nvidia-smi: not found"
	fi
	env | grep -E '^(NCCL|NCCLGO|CUDA)_' | sort
} >"$out/env.txt" 2>&1

if [ -x "$here/bin/ncclinfo" ]; then timeout 60 "$here/bin/ncclinfo" >"$out/ncclinfo.txt" 2>&1; fi

gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
: >"$out/tests.txt"
echo "GPU: ${gpu:-none found by nvidia-smi}" | tee "$out/summary.txt"
one="$(mktemp)"
while read -r name pkg; do
	left=$((budget - SECONDS - bench_s))
	if [ "$left" -lt 30 ]; then
		printf '%-10s %-22s time budget spent\n' "not run" "$pkg" | tee -a "$out/summary.txt"
		continue
	fi
	limit=$((left < per_pkg ? left : per_pkg))
	# timeout signals the whole process group: child processes of a test die with it.
	timeout -k 10 "$limit" "$here/tests/$name.test" -test.v -test.count=1 -test.timeout "$((limit - 5))s" \
		-test.run 'GPU' -test.bench 'GPU' -test.benchmem >"$one" 2>&1
	rc=$?
	{ echo "=== $pkg (exit $rc, limit ${limit}s)"; cat "$one"; } >>"$out/tests.txt"
	pass=$(grep -c '^--- PASS' "$one")
	fail=$(grep -c '^--- FAIL' "$one")
	skip=$(grep -c '^--- SKIP' "$one")
	why=""
	case $rc in
	0) s=ok ;;
	124 | 137) s=timeout ;;
	*) s="FAIL($rc)" ;;
	esac
	if [ "$rc" = 0 ] && [ "$pass" = 0 ] && [ "$skip" -gt 0 ]; then
		s=skipped
		why="$(grep -m1 -B1 '^--- SKIP' "$one" | head -1 | sed -E 's/^ +[^ ]+:[0-9]+: //')"
	elif [ "$rc" = 0 ] && [ "$pass" = 0 ]; then
		s=none why="no test or benchmark name matches GPU"
	fi
	printf '%-10s %-22s %3d passed %3d failed %3d skipped  %s\n' "$s" "$pkg" "$pass" "$fail" "$skip" "$why" | tee -a "$out/summary.txt"
done <"$here/tests/packages.txt"
rm -f "$one"

if [ -x "$here/bin/commbench" ]; then
	timeout -k 10 "$bench_s" "$here/bin/commbench" -op allreduce -b 8 -e 1G -f 2 >"$out/commbench.txt" 2>&1
	rc=$?
	printf '%-10s %-22s exit %d\n' "$([ $rc = 0 ] && echo ok || echo "FAIL($rc)")" "commbench" "$rc" | tee -a "$out/summary.txt"
fi
{
	echo
	echo "benchmarks:"
	grep -E '^Benchmark.*/op' "$out/tests.txt" || echo "(none ran)"
} >>"$out/summary.txt"

# The entry for docs/gpu-results.md.
field() { awk -v k="$1" '$1 == k { $1 = ""; sub(/^ +/, ""); print; exit }' "$out/ncclinfo.txt" 2>/dev/null; }
passed="$(awk '$1 != "GPU:" && NF >= 8 { printf "%s%s %s %d/%d", sep, $2, $1, $3, $3 + $5 + $7; sep = ", " }' "$out/summary.txt")"
{
	echo "| $(date -u +%Y-%m-%d) | ${gpu%%,*} | ${gpu#*, } | $(field CUDA) | $(field NCCL) | $(awk '/^commit:/ { print $2 }' "$here/MANIFEST") | $passed |"
	echo
	echo '```'
	cat "$out/summary.txt"
	echo
	cat "$out/commbench.txt" 2>/dev/null
	echo '```'
} >"$out/record.md"
sed -n '/^benchmarks:/,$p' "$out/summary.txt"
echo "results in $out: $(cd "$out" && echo *)"
