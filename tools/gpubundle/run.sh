#!/usr/bin/env bash
# run.sh OUT: run the ncclgo GPU checks on a machine with a GPU (no Go toolchain needed)
# and write the results under OUT (docs/gpu.md describes the files):
#   env.txt        date, host, bundle manifest, nvidia-smi, the libcuda and libnccl used
#                  (and how each was found), whether several ranks may share the GPU
#   ncclinfo.txt   tools/ncclinfo's report
#   tests.txt      every test binary's events (cmd/test2json's, as go test -json writes them), as it runs
#   commbench.txt  all-reduce 8 B to 256 MiB through comm (1, 2 and 4 ranks), as it runs
#   summary.txt    the verdict, one line per step, the targets, the benchmark lines
#   record.md      the entry for docs/gpu-results.md (bin/testreport -gpu OUT)
# record.md and summary.txt are rewritten after every step and from an exit trap, so a
# run that is stopped (SIGTERM, SIGINT, the budget) still leaves its record.
#
# Time: $NCCLGO_GPU_BUDGET s in all (default 300), at most $NCCLGO_GPU_TEST_TIMEOUT s per
# test binary (default 90) and $NCCLGO_GPU_BENCH_TIMEOUT s per commbench run (default
# 45, of which the first is kept in reserve); a step that no longer fits is "not run".
# A step over its limit gets SIGTERM, then SIGKILL $NCCLGO_GPU_KILL_AFTER s later
# (default 10), with its whole process group.
#
# Exit status: 0 only when every step is ok (it passed tests, none failed) and no target
# failed; 1 otherwise; 128+signal when interrupted.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: run.sh OUTDIR}"
mkdir -p "$out" || exit 1
out="$(cd "$out" && pwd)"
budget="${NCCLGO_GPU_BUDGET:-300}"
per_pkg="${NCCLGO_GPU_TEST_TIMEOUT:-90}"
bench_s="${NCCLGO_GPU_BENCH_TIMEOUT:-45}"
kill_after="${NCCLGO_GPU_KILL_AFTER:-10}"
benchtime="${NCCLGO_GPU_BENCHTIME:-0.3s}"
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
start=$SECONDS
failed=0      # set when a step is not ok
child=""      # pid of the running step's timeout(1)
current=""    # name of the running step
interrupted=""

: >"$out/tests.txt"
: >"$out/commbench.txt"

envline() { echo "$1: $2" >>"$out/env.txt"; }

# record rewrites summary.txt and record.md from what is under OUT so far. Without a
# working bin/testreport it writes a plain record from the step exit statuses.
record() {
	local rc=0
	if [ -x "$here/bin/testreport" ]; then
		"$here/bin/testreport" -gpu "$out" >/dev/null 2>"$out/.testreport.err"
		rc=$?
		if [ "$rc" -le 1 ] && [ -s "$out/record.md" ]; then
			rm -f "$out/.testreport.err"
			return "$rc"
		fi
	fi
	{
		echo "### $(date -u +%Y-%m-%d) (bin/testreport could not judge the run: exit $rc $(cat "$out/.testreport.err" 2>/dev/null))"
		echo
		echo "**FAIL: the run could not be judged; the steps' exit statuses:**"
		echo
		echo '```text'
		grep -hE '^### (end|notrun) ' "$out/tests.txt" "$out/commbench.txt" 2>/dev/null
		echo '```'
	} >"$out/record.md"
	cp "$out/record.md" "$out/summary.txt"
	rm -f "$out/.testreport.err"
	return 1
}

finish() {
	local rc=$?
	trap - EXIT TERM INT HUP
	if [ -n "${unpacked:-}" ]; then rm -rf "$unpacked"; fi
	if [ -n "$interrupted" ]; then envline interrupted "$interrupted"; fi
	record
	local judged=$?
	cat "$out/summary.txt" 2>/dev/null
	echo "results in $out: $(cd "$out" && echo *)"
	if [ -n "$interrupted" ]; then exit "$rc"; fi
	if [ "$failed" != 0 ] || [ "$judged" != 0 ] || [ "$rc" != 0 ]; then exit 1; fi
	exit 0
}

on_signal() {
	interrupted="$1 during ${current:-setup} after $((SECONDS - start))s"
	if [ -n "$child" ]; then
		kill -TERM "$child" 2>/dev/null # timeout(1) passes it to the step's process group
		wait "$child" 2>/dev/null
	fi
	exit "$2"
}
trap finish EXIT
trap 'on_signal SIGTERM 143' TERM
trap 'on_signal SIGINT 130' INT
trap 'on_signal SIGHUP 129' HUP

# run_step KIND NAME FILE LIMIT CMD...: run CMD under timeout(1) in the background (so
# that a signal to this script is handled at once), its output appended to FILE as it
# comes, framed for bin/testreport.
run_step() {
	local kind="$1" name="$2" file="$3" limit="$4" t0=$SECONDS rc
	shift 4
	current="$name"
	echo "### step $kind $name" >>"$file"
	echo "--- $name (limit ${limit}s)"
	# timeout(1) signals its whole process group: child processes of a test die with it.
	timeout -k "$kill_after" "$limit" "$@" >>"$file" 2>&1 </dev/null &
	child=$!
	wait "$child"
	rc=$?
	child=""
	current=""
	echo "### end $name exit=$rc seconds=$((SECONDS - t0)) limit=$limit" >>"$file"
	if [ "$rc" != 0 ]; then failed=1; fi
	record
}

# go_timeout LIMIT: Go's -test.timeout for a step of LIMIT s: 5 s earlier, so that the
# binary prints every goroutine's stack before timeout(1) stops it; none for short limits.
go_timeout() { if [ "$1" -gt 10 ]; then echo "$(($1 - 5))s"; else echo 0; fi; }

# left prints the seconds of the budget left after keeping reserve seconds.
left() { echo $((budget - (SECONDS - start) - $1)); }

# fits NAME FILE WANT RESERVE: sets limit for a step that wants WANT seconds, keeping
# RESERVE seconds of the budget; when fewer than 20 are left it frames the step as not
# run, counts that as a failure and returns 1.
fits() {
	local l
	l="$(left "$4")"
	if [ "$l" -lt 20 ]; then
		echo "### notrun $1 -- time budget spent (${l}s of ${budget}s left)" >>"$2"
		failed=1
		record
		return 1
	fi
	limit=$((l < $3 ? l : $3))
}

# --- Libraries --------------------------------------------------------------------
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "host: $(uname -srm)"
	sed -e 's/^commit: /commit: /' "$here/MANIFEST" 2>/dev/null || echo "manifest: missing"
	echo "budget: ${budget}s in all, ${per_pkg}s per test binary, ${bench_s}s per commbench run"
} >"$out/env.txt"

# libcuda: the soname (the loader's own search: LD_LIBRARY_PATH, ld.so.cache), else the
# folders NVIDIA's container images put the driver in.
find_cuda() {
	local d f
	if [ -n "${NCCLGO_LIBCUDA:-}" ]; then echo "$NCCLGO_LIBCUDA (from NCCLGO_LIBCUDA)"; return; fi
	local IFS=:
	for d in ${LD_LIBRARY_PATH:-}; do
		if [ -n "$d" ] && [ -e "$d/libcuda.so.1" ]; then echo "$d/libcuda.so.1 (soname, through LD_LIBRARY_PATH)"; return; fi
	done
	unset IFS
	f="$({ ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | awk '$1 == "libcuda.so.1" { print $NF; exit }')"
	if [ -n "$f" ]; then echo "$f (soname, through the ld.so cache)"; return; fi
	for d in ${NCCLGO_GPU_LIBCUDA_DIRS:-/usr/local/nvidia/lib64 /usr/lib64}; do
		if [ -e "$d/libcuda.so.1" ]; then
			echo "$d/libcuda.so.1 (the soname did not resolve; set as NCCLGO_LIBCUDA)"
			return
		fi
	done
	echo "not found (soname, ${NCCLGO_GPU_LIBCUDA_DIRS:-/usr/local/nvidia/lib64 /usr/lib64})"
}
cuda_lib="$(find_cuda)"
case "$cuda_lib" in *"set as NCCLGO_LIBCUDA)") export NCCLGO_LIBCUDA="${cuda_lib%% (*}" ;; esac
envline libcuda "$cuda_lib"

# libnccl: $NCCLGO_LIBNCCL, else the pip NCCL (nvidia-nccl-cu12/-cu13) of the image's
# python3, else the same wheel folder under the usual site-packages folders, else the
# loader's own search (soname, $NCCL_HOME, $CUDA_HOME).
find_nccl() {
	local py f d
	if [ -n "${NCCLGO_LIBNCCL:-}" ]; then echo "$NCCLGO_LIBNCCL (from NCCLGO_LIBNCCL)"; return; fi
	for py in "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python3}" python3; do
		[ -n "$py" ] && command -v "$py" >/dev/null || continue
		# The wheel's folder under this python's package folders: nvidia/nccl/lib, or
		# nvidia/<cuXX>/lib where CUDA 13 wheels put their libraries.
		f="$(timeout 30 "$py" -c '
import glob, site, sys
dirs = [d for d in site.getsitepackages() + [site.getusersitepackages()] + sys.path if d]
for d in dirs:
    for f in sorted(glob.glob(d + "/nvidia/nccl/lib/libnccl.so.2")) + sorted(glob.glob(d + "/nvidia/*/lib/libnccl.so.2")):
        print(f)
        raise SystemExit
' 2>/dev/null)"
		if [ -n "$f" ] && [ -f "$f" ]; then echo "$f (pip NCCL of $(command -v "$py"))"; return; fi
	done
	for d in ${VIRTUAL_ENV:+$VIRTUAL_ENV/lib/python3*/site-packages} ${CONDA_PREFIX:+$CONDA_PREFIX/lib/python3*/site-packages} \
		${HOME:+$HOME/.local/lib/python3*/site-packages} /usr/local/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages \
		/usr/lib/python3*/site-packages /usr/lib/python3*/dist-packages /usr/lib/python3/dist-packages /opt/*/lib/python3*/site-packages; do
		for f in "$d"/nvidia/nccl/lib/libnccl.so.2 "$d"/nvidia/*/lib/libnccl.so.2; do
			if [ -f "$f" ]; then echo "$f (site-packages folder)"; return; fi
		done
	done
	echo "<loader search: soname, \$NCCL_HOME, \$CUDA_HOME>"
}
nccl_lib="$(find_nccl)"
case "$nccl_lib" in "<"*) ;; *) export NCCLGO_LIBNCCL="${nccl_lib%% (*}" ;; esac
envline libnccl "$nccl_lib"

gpu=""
if command -v nvidia-smi >/dev/null; then
	gpu="$(timeout 30 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
	gpus="$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"
	{
		echo "nvidia-smi:"
		timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,pci.bus_id --format=csv 2>&1 | sed 's/^/  /'
		timeout 30 nvidia-smi 2>&1 | grep -m1 'CUDA Version' | sed 's/^/  /'
	} >>"$out/env.txt"
else
	gpus=0
	envline nvidia-smi "not found"
fi
if [ -n "$gpu" ]; then envline gpu "${gpu%%,*}"; envline driver "${gpu#*, }"; fi

if [ -x "$here/bin/ncclinfo" ]; then
	timeout 60 "$here/bin/ncclinfo" >"$out/ncclinfo.txt" 2>&1
	envline ncclinfo "exit $?"
else
	echo "bin/ncclinfo is missing from the bundle" >"$out/ncclinfo.txt"
fi
nccl_version="$(grep -m1 -oE '^NCCL +NCCL [0-9]+\.[0-9]+\.[0-9]+' "$out/ncclinfo.txt" | awk '{ print $3 }')"
cuda_version="$(grep -m1 -oE '^CUDA +CUDA [0-9]+\.[0-9]+' "$out/ncclinfo.txt" | awk '{ print $3 }')"
if [ -n "$nccl_version" ]; then envline nccl "NCCL $nccl_version"; fi
if [ -n "$cuda_version" ]; then envline cuda "CUDA $cuda_version"; fi

# Several ranks on one GPU: NCCL < 2.30 refuses them ("Duplicate GPU detected", init.cc);
# from 2.30.3 NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL_PARAM MultiRankGpuEnable) allows them.
multi=0
IFS=. read -r ma mi _ <<<"${nccl_version:-0.0.0}"
code=$((10#${ma:-0} * 10000 + 10#${mi:-0} * 100))
if [ -z "$nccl_version" ]; then
	envline multi-rank "no: no libnccl was loaded (ncclinfo.txt), so the 2- and 4-rank conformance, the two-rank path and commbench -g 2/-g 4 did not run"
elif [ "$code" -lt 23000 ]; then
	envline multi-rank "no: NCCL $nccl_version refuses two ranks on one GPU (\"Duplicate GPU detected\"); NCCL_MULTI_RANK_GPU_ENABLE exists from NCCL 2.30, so the 2- and 4-rank conformance, the two-rank path and commbench -g 2/-g 4 did not run"
else
	multi=1
	export NCCL_MULTI_RANK_GPU_ENABLE=1
	envline multi-rank "yes: NCCL $nccl_version >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 on ${gpus:-?} GPU(s): conformance and commbench with 2 and 4 ranks, the two-rank path's test and crossover"
fi
env | grep -E '^(NCCL|NCCLGO|CUDA)_' | sort | sed 's/^/  /' | { echo "variables:"; cat; } >>"$out/env.txt"
record

# test_binary NAME: the test binary NAME, unpacked from tests/NAME.test.gz (build.sh
# gzips them to stay under the device tool's carry limit) into $unpacked on first use,
# or tests/NAME.test as it is. It fails, saying so, when gzip does; the step then fails.
unpacked="$(mktemp -d "${TMPDIR:-/tmp}/ncclgo-gpu-bundle.XXXXXX")" || exit 1
test_binary() {
	local gz="$here/tests/$1.test.gz" bin="$unpacked/$1.test"
	if [ ! -f "$gz" ]; then echo "$here/tests/$1.test"; return; fi
	if [ ! -x "$bin" ]; then
		if ! gzip -dc "$gz" >"$bin.part" || ! chmod +x "$bin.part" || ! mv "$bin.part" "$bin"; then
			echo "cannot unpack $gz into $unpacked" >&2
			return 1
		fi
	fi
	echo "$bin"
}

# --- Test binaries, lowest layer first, then the multi-rank passes ------------------
# A test binary runs with -test.v=test2json and bin/test2json turns its output into the events
# `go test -json` writes, which bin/testreport reads; the step's exit status stays the binary's.
# The wrapping shell outlives a SIGTERM (trap, not ignore: the binary keeps the default) until
# the binary is gone, so timeout(1) still sends SIGKILL to a binary that ignores SIGTERM.
events=(bash -c 'trap : TERM; set -o pipefail; "${@:3}" -test.v=test2json 2>&1 | "$1" -p "$2"' events "$here/bin/test2json")
gpu_args=(-test.count=1 -test.run GPU -test.bench GPU -test.benchmem -test.benchtime "$benchtime")
while read -r name pkg; do
	[ -n "$name" ] || continue
	fits "$pkg" "$out/tests.txt" "$per_pkg" "$bench_s" || continue
	bin="$(test_binary "$name")" || bin="$unpacked/$name.test (not unpacked)"
	run_step test "$pkg" "$out/tests.txt" "$limit" "${events[@]}" "$pkg" "$bin" "${gpu_args[@]}" -test.timeout "$(go_timeout "$limit")"
done <"$here/tests/packages.txt"

commtest="$(awk '$2 == "./comm/commtest" { print $1 }' "$here/tests/packages.txt")"
if [ "$multi" = 1 ] && [ -n "$commtest" ]; then
	for world in 2 4; do
		name="./comm/commtest ($world ranks)"
		fits "$name" "$out/tests.txt" "$per_pkg" "$bench_s" || continue
		bin="$(test_binary "$commtest")" || bin="$unpacked/$commtest.test (not unpacked)"
		NCCLGO_GPU_WORLD=$world run_step test "$name" "$out/tests.txt" "$limit" "${events[@]}" "$name" "$bin" \
			-test.count=1 -test.run 'GPUConformance' -test.timeout "$(go_timeout "$limit")"
	done
fi

# --- commbench ---------------------------------------------------------------------
if [ -x "$here/bin/commbench" ]; then
	ranks=(1)
	if [ "$multi" = 1 ]; then ranks=(1 2 4); fi
	for g in "${ranks[@]}"; do
		name="commbench -g $g"
		fits "$name" "$out/commbench.txt" "$bench_s" 0 || continue
		run_step tool "$name" "$out/commbench.txt" "$limit" "$here/bin/commbench" -g "$g" -op allreduce -b 8 -e 256M -f 2 -T "$((limit > 10 ? limit - 5 : limit))s"
	done
else
	echo "### notrun commbench -- bin/commbench is missing from the bundle" >>"$out/commbench.txt"
	failed=1
fi
exit 0
