#!/usr/bin/env bash
# fetch.sh: download the pinned NVIDIA headers and libraries of headers/manifest.tsv into
# a cache outside the repository, verify their checksums, and (for the libraries) make
# Debian's libnccl loadable on Debian 12. Debian lines come from Debian's archive: nothing
# is installed and the machine's apt sources are never changed (apt runs with a private
# source list and state); the .debs are deleted once their files are extracted.
# github/pypi lines (NCCL releases Debian does not serve) are made by headers/nvheader
# from NVIDIA's sources; where those hosts cannot be reached (CI) they are skipped, and
# tools/bindgen reads those sets from their committed snapshots.
#
#   headers/fetch.sh headers            header sets (for tools/bindgen)
#   headers/fetch.sh libs               libraries (for the tests)
#   headers/fetch.sh kernels            header sets, then ptxas and the CUDA/libcu++ headers
#                                       of the kernel checks (manifest kinds tool, include)
#   headers/fetch.sh path KIND SET      print the cached folder of one set
#   NCCL=2.30.7 headers/fetch.sh add    take a new NCCL release: nccl.h from Debian if it
#                                       serves the release, else NVIDIA/nccl's tag, else
#                                       the nvidia-nccl-cu12 wheel (NCCL_SOURCE=debian,
#                                       github or pypi picks one; NCCL_SOURCE=git with
#                                       NCCL_GIT=<a local clone of NVIDIA/nccl> needs no
#                                       network); pins it in the manifest and caches it
#
# Needs: apt-get and dpkg-deb (Debian's own), go, and git for NCCL_SOURCE=git.
# Cache: $NCCLGO_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/ncclgo (the Makefile
# exports the same rule). NCCLGO_KEEP_DEBS=1 keeps the downloaded .debs.
# NCCLGO_MANIFEST, NCCLGO_DEBIAN_MIRROR, NCCLGO_GITHUB_RAW and NCCLGO_PYPI point it at
# other inputs (the tests' fixtures); NCCLGO_APT_TRUSTED=1 trusts an unsigned mirror (a
# test's local archive: never for Debian's).
#
# Any failure stops the script with one line that names the set, the package and what to
# do. Functions that can fail (die) never run inside $(...), where die would only end a
# subshell: they hand results back in variables (deb_path) or files.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
manifest="${NCCLGO_MANIFEST:-$here/manifest.tsv}"
cache="${NCCLGO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclgo}"
apt_dir="$cache/apt"
mirror="${NCCLGO_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
github_base="${NCCLGO_GITHUB_RAW:-https://raw.githubusercontent.com}"
pypi_base="${NCCLGO_PYPI:-https://pypi.org}"

die() { echo "fetch.sh: $*" >&2; exit 1; }

# why LOG: the line of a tool's log that says what went wrong (for one-line messages).
why() {
	local l
	l="$(grep -m1 -E '^E: ' "$1" 2>/dev/null || true)"
	[ -n "$l" ] || l="$(grep -m1 -E '^(dpkg-deb: |tar: |nvheader: |go: |error:)|[Ee]rror' "$1" 2>/dev/null || true)"
	[ -n "$l" ] || l="$(grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -1 || true)"
	echo "${l:-no message}"
}

tmp_root="$(mktemp -d)" || die "cannot make a temporary folder: check TMPDIR"
fetching="" # set once a command that downloads starts: only those drop the .debs at exit
trap '[ -z "$fetching" ] || drop_debs; rm -rf "$tmp_root"' EXIT

# debian_suite SUITE: whether SUITE is one of Debian's (a manifest line from Debian's
# archive); the other sources are github and pypi.
debian_re='^(sid|experimental|unstable|testing|stable|oldstable|oldoldstable|buster|bullseye|bookworm|trixie|forky|duke)(-(updates|backports|security|proposed-updates))?$'
debian_suite() { [[ "$1" =~ $debian_re ]]; }

# check_manifest: every line has the columns, a known kind and source, and a sha256.
check_manifest() {
	[ -r "$manifest" ] || die "cannot read the manifest $manifest: check NCCLGO_MANIFEST"
	local n=0 line kind set pkg suite comp ver file sum url
	local -a cols
	while IFS= read -r line || [ -n "$line" ]; do
		n=$((n + 1))
		case "$line" in '#'* | '') continue ;; esac
		IFS=$'\t' read -r -a cols <<<"$line"
		kind="${cols[0]}" set="${cols[1]:-?}" pkg="${cols[2]:-?}" suite="${cols[3]:-}" ver="${cols[5]:-}" sum="${cols[7]:-}"
		[ "${#cols[@]}" -ge 8 ] || die "$set: $pkg: $manifest line $n has ${#cols[@]} columns, not 8 or more; fix that line"
		case "$kind" in header | lib | tool | include) ;; *) die "$set: $pkg $ver: kind $kind ($manifest line $n) is not header, lib, tool or include; fix that line" ;; esac
		case "$suite" in github | pypi) ;; *) debian_suite "$suite" || die "$set: $pkg $ver: suite $suite ($manifest line $n) is neither a Debian suite nor github or pypi; fix that line" ;; esac
		[[ "$sum" =~ ^[0-9a-f]{64}$ ]] || die "$set: $pkg $ver: sha256 \"$sum\" ($manifest line $n) is not 64 hex digits; fix that line"
	done <"$manifest"
}

apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
	-o Dir::State::status=/dev/null -o APT::Architecture=amd64 -o Debug::NoLocking=1
	-o APT::Sandbox::User=root -o Acquire::Languages=none -q)

# apt_update WHO [SUITE COMPONENT]...: the private source list (every Debian suite and
# component the manifest pins, and the pairs given) and apt-get update, once per run. WHO
# ("set: package version") starts the message of a failure.
apt_ready=""
apt_update() {
	local who="$1"
	shift
	[ -n "$apt_ready" ] && return 0
	mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs" ||
		die "$who: cannot make $apt_dir: check the cache folder (NCCLGO_CACHE)"
	local opt="signed-by=/usr/share/keyrings/debian-archive-keyring.gpg"
	[ "${NCCLGO_APT_TRUSTED:-}" = 1 ] && opt="trusted=yes"
	# Only Debian suites become sources: a github or pypi line is no apt source.
	{
		awk -F'\t' -v re="$debian_re" '$1 !~ /^#/ && NF >= 8 && $4 ~ re {print $4, $5}' "$manifest"
		if [ "$#" -gt 0 ]; then printf '%s\n' "$@"; fi
	} | sort -u | while read -r s c; do echo "deb [$opt] $mirror $s $c"; done >"$apt_dir/sources.list" ||
		die "$who: cannot write $apt_dir/sources.list: check the cache folder (NCCLGO_CACHE)"
	apt-get "${apt_opts[@]}" --error-on=any update >"$apt_dir/update.log" 2>&1 ||
		die "$who: apt-get update against $mirror failed ($(why "$apt_dir/update.log")); check the network and NCCLGO_DEBIAN_MIRROR (the full log is $apt_dir/update.log)"
	apt_ready=1
}

# served_versions PACKAGE: every version of PACKAGE the archive serves now, "version
# (suite/component)", comma-separated (empty when none). Cannot fail.
served_versions() {
	apt-cache "${apt_opts[@]}" madison "$1" 2>/dev/null |
		awk -F'|' '{gsub(/ /,"",$2); n=split($3,a," "); print $2" ("a[n-2]")"}' | sort -u | paste -sd, - | sed 's/,/, /g' || true
}

# find_deb PACKAGE VERSION: the cached .deb of PACKAGE VERSION (any architecture), if any.
find_deb() {
	local f
	for f in "$apt_dir/debs/${1}_${2//:/%3a}_"*.deb; do
		[ -s "$f" ] && echo "$f" && return 0
	done
	return 0
}

# fetch_deb WHO PACKAGE VERSION: sets deb_path to the .deb of PACKAGE VERSION (downloads it once).
deb_path=""
fetch_deb() {
	local who="$1" pkg="$2" ver="$3" served
	deb_path="$(find_deb "$pkg" "$ver")"
	[ -n "$deb_path" ] && return 0
	apt_update "$who"
	if ! (cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" download "$pkg=$ver") >"$apt_dir/download.log" 2>&1; then
		served="$(served_versions "$pkg")"
		case ", $served," in
		*", $ver ("*) die "$who: apt-get download failed ($(why "$apt_dir/download.log")); check the network and run again (the full log is $apt_dir/download.log)" ;;
		esac
		die "$who is not served by $mirror (it serves ${served:-no version of $pkg}); pin a served version and its sha256 in $manifest"
	fi
	deb_path="$(find_deb "$pkg" "$ver")"
	[ -n "$deb_path" ] || die "$who: apt-get download left no .deb in $apt_dir/debs (the log is $apt_dir/download.log)"
	# A running total of what was downloaded (CI reports it).
	echo "$(($(cat "$apt_dir/downloaded-bytes" 2>/dev/null || echo 0) + $(stat -c %s "$deb_path")))" >"$apt_dir/downloaded-bytes"
}

# extract_files WHO DEB DIR FILE...: extract FILEs (paths inside the .deb, without ./) into
# DIR in one pass.
extract_files() {
	local who="$1" d="$2" dir="$3" log="$tmp_root/extract.log" f
	shift 3
	local -a members=()
	for f in "$@"; do members+=("./$f"); done
	mkdir -p "$dir" || die "$who: cannot make $dir: check TMPDIR"
	if ! dpkg-deb --fsys-tarfile "$d" 2>"$log.dpkg" | tar -x -C "$dir" "${members[@]}" 2>"$log"; then
		local -a st=("${PIPESTATUS[@]}")
		if [ "${st[0]}" != 0 ] && [ "${st[1]}" = 0 ] || ! grep -q '^tar: ' "$log" || grep -q 'does not look like a tar archive' "$log"; then
			rm -f "$d"
			die "$who: $d is not a readable .deb ($(why "$log.dpkg")); it is deleted now: run again"
		fi
		f="$(sed -n -E 's|^tar: \./(.*): Not found in archive$|\1|p' "$log" | head -1)"
		[ -z "$f" ] || die "$who has no $f; fix the file column of its line in $manifest"
		die "$who: extracting ${*} from $d failed ($(why "$log.dpkg"); $(why "$log")); check the free space of TMPDIR and run again"
	fi
}

# check_sum WHO FILE PATH WANT: FILE (PATH inside the package) has the pinned sha256 WANT.
check_sum() {
	local who="$1" f="$2" file="$3" want="$4" got
	got="$(sha256sum "$f" 2>/dev/null)" || die "$who: cannot read $f for its sha256: check TMPDIR"
	got="${got%% *}"
	[ "$got" = "$want" ] || die "$who: $file has sha256 $got, $manifest pins $want; if the package changed on purpose, pin the new sha256 there"
}

# build_tool WHO NAME: builds headers/NAME once per run into $tmp_root/NAME.
build_tool() {
	local who="$1" name="$2"
	[ -x "$tmp_root/$name" ] && return 0
	(cd "$here/.." && go build -o "$tmp_root/$name" "./headers/$name") >"$tmp_root/build.log" 2>&1 ||
		die "$who: cannot build headers/$name ($(why "$tmp_root/build.log")); check the Go toolchain (go version) and the checkout"
}

# fetch_kind KIND: fetch every manifest entry of KIND ("header" or "lib").
unreachable=" "
fetch_kind() {
	local want="$1" kind set pkg suite comp ver file sum url dir dest who rc tmp
	while IFS=$'\t' read -r kind set pkg suite comp ver file sum url; do
		case "$kind" in '#'* | '') continue ;; esac
		[ "$kind" = "$want" ] || continue
		dir="$cache/$kind/$set"
		case "$suite" in
		github | pypi)
			# A set's nccl.h, or a header it includes (src/include/X, cached as <set>/X).
			local args=()
			case "$file" in
			src/include/*) dest="$dir/${file#src/include/}" args=(-file "$file") ;;
			*) dest="$dir/$(basename "$file" .in)" ;;
			esac
			if [ -f "$dir/.verified" ] && [ -f "$dest" ]; then continue; fi
			case "$unreachable" in *" $suite "*) continue ;; esac
			who="$set: $pkg $ver ($suite)"
			mkdir -p "$(dirname "$dest")" || die "$who: cannot make $dir: check the cache folder (NCCLGO_CACHE)"
			local v="${ver#v}"
			v="${v%-*}"
			[ "$suite" = pypi ] && args+=(-package "$pkg")
			echo "fetch.sh: $set: $suite $pkg $ver -> $dest" >&2
			build_tool "$who" nvheader
			rc=0
			"$tmp_root/nvheader" -github-base "$github_base" -pypi-base "$pypi_base" -source "$suite" -version "$v" -tag "$ver" "${args[@]}" \
				-sha256 "$sum" -out "$dest" >/dev/null 2>"$tmp_root/nvheader.log" || rc=$?
			if [ "$rc" = 3 ]; then
				unreachable+="$suite "
				echo "fetch.sh: $set and the other $suite sets not fetched ($suite cannot be reached from here): tools/bindgen reads them from gen/snapshot (their committed snapshots)" >&2
				continue
			fi
			if [ "$rc" != 0 ]; then
				if grep -q 'the manifest pins' "$tmp_root/nvheader.log"; then
					die "$who: $(why "$tmp_root/nvheader.log" | sed 's/^nvheader: //'); if the release was re-tagged on purpose, pin the new sha256 in $manifest"
				fi
				die "$who: $(why "$tmp_root/nvheader.log" | sed 's/^nvheader: //'); check its line in $manifest (headers/nvheader makes nccl.h from the $suite release)"
			fi
			touch "$dir/.verified" || die "$who: cannot write $dir: check the cache folder (NCCLGO_CACHE)"
			continue
			;;
		esac
		# A set may pin several files (a header and the headers it includes): a header
		# counts as fetched only once its own file is there too. Files below usr/include
		# keep their path there (nccl_device/core.h), the others only their name.
		case "$file" in
		usr/include/*) dest="$dir/${file#usr/include/}" ;;
		*) dest="$dir/$(basename "$file")" ;;
		esac
		if [ -f "$dir/.verified" ] && { [ "$kind" = lib ] || [ -f "$dest" ]; }; then continue; fi
		who="$set: $pkg $ver ($suite/$comp)"
		echo "fetch.sh: $who -> $dest" >&2
		fetch_deb "$who" "$pkg" "$ver"
		tmp="$tmp_root/extract"
		rm -rf "$tmp"
		extract_files "$who" "$deb_path" "$tmp" "$file"
		check_sum "$who" "$tmp/$file" "$file" "$sum"
		{ mkdir -p "$(dirname "$dest")" && mv "$tmp/$file" "$dest"; } || die "$who: cannot write $dest: check the cache folder (NCCLGO_CACHE)"
		if [ "$kind" = lib ]; then prepare_lib "$who" "$set" "$dir" "$dest"; fi
		touch "$dir/.verified" || die "$who: cannot write $dir: check the cache folder (NCCLGO_CACHE)"
	done <"$manifest"
}

# drop_debs: delete the downloaded .debs (hundreds of MB; only a few files of them are
# kept), unless NCCLGO_KEEP_DEBS is set. Also when the run fails (the EXIT trap).
drop_debs() {
	[ -n "${NCCLGO_KEEP_DEBS:-}" ] && return 0
	rm -f "$apt_dir"/debs/*.deb "$apt_dir"/cache/archives/*.deb 2>/dev/null || true
}

# prepare_lib WHO SET DIR FILE: soname links; for libnccl the bookworm patch of sources.md.
prepare_lib() {
	local who="$1" set="$2" dir="$3" file="$4" soname
	build_tool "$who" patchlib
	soname="$("$tmp_root/patchlib" -soname "$file" 2>"$tmp_root/patchlib.log")" ||
		die "$who: reading the SONAME of $file failed ($(why "$tmp_root/patchlib.log")); check the file column of its line in $manifest"
	case "$set" in
	nccl-*)
		# Debian's libnccl references six C23 functions of glibc 2.38; bookworm has 2.36.
		# patchlib renames each reference to the classic function (the same for the
		# decimal and hex input NCCL parses), clears its version and marks the GLIBC_2.38
		# requirement weak: no patchelf, no shim library.
		local syms="__isoc23_sscanf __isoc23_fscanf __isoc23_strtol __isoc23_strtoll __isoc23_strtoul __isoc23_strtoull"
		local renames="__isoc23_sscanf=sscanf,__isoc23_fscanf=fscanf,__isoc23_strtol=strtol,__isoc23_strtoll=strtoll,__isoc23_strtoul=strtoul,__isoc23_strtoull=strtoull"
		cp "$file" "$dir/libnccl.so.2" || die "$who: cannot copy $file to $dir/libnccl.so.2: check the cache folder (NCCLGO_CACHE)"
		# shellcheck disable=SC2086
		"$tmp_root/patchlib" -weak GLIBC_2.38 -rename "$renames" "$dir/libnccl.so.2" $syms >"$tmp_root/patchlib.log" 2>&1 ||
			die "$who: patching $dir/libnccl.so.2 for glibc 2.36 failed ($(why "$tmp_root/patchlib.log")); see headers/README.md"
		rm -f "$file"
		;;
	*)
		if [ -n "$soname" ]; then ln -sf "$(basename "$file")" "$dir/$soname" || die "$who: cannot link $dir/$soname: check the cache folder (NCCLGO_CACHE)"; fi
		;;
	esac
}

# pin_and_cache SET LINE FILE FROM: append LINE to the manifest and cache FILE as the set's
# nccl.h (what make generate reads next), without fetching it again.
pin_and_cache() {
	local set="$1" line="$2" file="$3" from="$4" dir="$cache/header/$1"
	{ mkdir -p "$dir" && cp "$file" "$dir/nccl.h" && touch "$dir/.verified"; } ||
		die "$set: cannot write $dir: check the cache folder (NCCLGO_CACHE)"
	if [ -s "$manifest" ] && [ -n "$(tail -c1 "$manifest")" ]; then echo >>"$manifest"; fi
	printf '%s\n' "$line" >>"$manifest" || die "$set: cannot append to $manifest: check its permissions"
	echo "fetch.sh: pinned $set (from $from) in $manifest and cached its nccl.h; now append \"$set\" to sets in gen/nccl.json and run make generate" >&2
}

# add: take a new NCCL release ($NCCL) into the manifest and the cache: Debian if it serves
# the release (or NCCL_SOURCE=debian), else NVIDIA/nccl's tag (github), else the wheel
# (pypi); NCCL_SOURCE=git reads the tag from the local clone NCCL_GIT (no network).
add_nccl() {
	local v="${NCCL:-}" src="${NCCL_SOURCE:-}" git="${NCCL_GIT:-}"
	[ -n "$v" ] || die "add: no release given; set NCCL=<version>, e.g. make headers NCCL=2.30.7"
	[[ "$v" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "add: NCCL=$v is not a release X.Y.Z; e.g. make headers NCCL=2.30.7"
	local set="nccl-$v" out="$tmp_root/nccl.h" line ver suite s served who reasons=""
	case "$src" in
	"" | debian | github | pypi) ;;
	git)
		[ -n "$git" ] || die "$set: NVIDIA/nccl v$v-1 (git): NCCL_SOURCE=git needs NCCL_GIT=<the folder of a local clone of NVIDIA/nccl>"
		[ -d "$git" ] || die "$set: NVIDIA/nccl v$v-1 (git): NCCL_GIT=$git is not a folder; give the folder of a local clone of NVIDIA/nccl"
		;;
	*) die "$set: NCCL_SOURCE=$src is not debian, github, pypi or git; pick one of them, or leave it unset to try Debian, github and pypi" ;;
	esac
	if grep -q "^header	$set	" "$manifest"; then die "$set is already pinned in $manifest; nothing to add (make headers fetches it)"; fi
	if [ -z "$src" ] || [ "$src" = debian ]; then
		who="$set: libnccl-dev $v"
		apt_update "$who" "sid contrib" "trixie contrib" "bookworm contrib"
		served="$(served_versions libnccl-dev)"
		line="$(tr ',' '\n' <<<"$served" | sed 's/^ //' | grep -m1 "^$v-" || true)"
		if [ -n "$line" ]; then
			ver="${line%% *}"
			suite="${line#*(}"
			suite="${suite%%/*}"
			who="$set: libnccl-dev $ver ($suite/contrib)"
			fetch_deb "$who" libnccl-dev "$ver"
			extract_files "$who" "$deb_path" "$tmp_root/add" usr/include/nccl.h
			mv "$tmp_root/add/usr/include/nccl.h" "$out" || die "$who: cannot move nccl.h out of $tmp_root: check TMPDIR"
			s="$(sha256sum "$out")" || die "$who: cannot read $out for its sha256: check TMPDIR"
			pin_and_cache "$set" "$(printf 'header\t%s\tlibnccl-dev\t%s\tcontrib\t%s\tusr/include/nccl.h\t%s' "$set" "$suite" "$ver" "${s%% *}")" "$out" "Debian $suite, $ver"
			return 0
		fi
		[ "$src" = debian ] && die "$who: Debian does not serve it (it serves ${served:-no libnccl-dev}); try NCCL_SOURCE=github, pypi, or git with NCCL_GIT=<a local clone of NVIDIA/nccl>"
		echo "fetch.sh: $who: Debian does not serve it (it serves ${served:-no libnccl-dev}); trying NVIDIA's sources" >&2
	fi
	local -a tries=()
	case "$src" in
	"")
		tries=(github pypi:nvidia-nccl-cu12 pypi:nvidia-nccl-cu13)
		if [ -n "$git" ]; then tries=(git "${tries[@]}"); fi
		;;
	github) tries=(github) ;;
	pypi) tries=(pypi:nvidia-nccl-cu12 pypi:nvidia-nccl-cu13) ;;
	git) tries=(git) ;;
	esac
	build_tool "$set: NVIDIA/nccl v$v-1" nvheader
	for s in "${tries[@]}"; do
		local -a args=(-source "${s%%:*}")
		case "$s" in pypi:*) args+=(-package "${s#pypi:}") ;; git) args+=(-git "$git") ;; esac
		if line="$("$tmp_root/nvheader" -github-base "$github_base" -pypi-base "$pypi_base" "${args[@]}" -version "$v" -out "$out" 2>"$tmp_root/nvheader.log")"; then
			case "$s" in git) s="the local clone $git" ;; esac
			pin_and_cache "$set" "$line" "$out" "$s"
			return 0
		fi
		reasons+="; $s: $(why "$tmp_root/nvheader.log" | sed 's/^nvheader: //')"
	done
	if [ "$src" = git ]; then
		die "$set: NVIDIA/nccl v$v-1 could not be had (${reasons#; }); check the release, and that $git has its tag (git -C $git fetch --tags)"
	fi
	die "$set: NVIDIA/nccl v$v-1 could not be had (${reasons#; }); check the release, or give a local clone: NCCL_SOURCE=git NCCL_GIT=<clone of NVIDIA/nccl>"
}

# --- kernel checks (kernels/): ptxas, CUDA's fp16/bf16 headers, libcu++'s <nv/target> -------
#   headers/fetch.sh kernels   fetch the manifest's "tool" and "include" sets (make kernel-inputs)
# A "tool" file is cached as <cache>/tool/<set>/<file name>, an "include" file as
# <cache>/include/<set>/<its path below usr/include>; every file of a set comes from one package.
# Each .deb is read once for all the files taken from it. The kernels command fetches the
# header sets first in the same run, so the nvidia-cuda-dev .deb that cuda.h and the fp16
# headers share is downloaded once; the run deletes the .debs at its end (drop_debs).

set_verified() { [ -f "$cache/$1/$2/.verified" ]; }

# kernel_extract PACKAGE VERSION WHERE LINES: extract, verify and cache the files of LINES
# ("kind<TAB>set<TAB>file<TAB>sha256", one a line) from one .deb (WHERE: suite/component), in one pass.
kernel_extract() {
	local pkg="$1" ver="$2" where="$3" lines="$4" tmp kind set file sum dest who
	local -a files=() sets=()
	while IFS=$'\t' read -r kind set file sum; do
		files+=("$file")
		[[ " ${sets[*]} " == *" $kind/$set "* ]] || sets+=("$kind/$set")
	done <<<"$lines"
	who="${sets[*]}: $pkg $ver ($where)"
	fetch_deb "$who" "$pkg" "$ver"
	echo "fetch.sh: ${sets[*]}: ${#files[@]} files from $pkg $ver" >&2
	tmp="$tmp_root/kernel"
	rm -rf "$tmp"
	extract_files "$who" "$deb_path" "$tmp" "${files[@]}"
	for set in "${sets[@]}"; do rm -rf "${cache:?}/$set.partial"; done
	while IFS=$'\t' read -r kind set file sum; do
		check_sum "$kind/$set: $pkg $ver ($where)" "$tmp/$file" "$file" "$sum"
		case "$kind" in
		tool) dest="$cache/tool/$set.partial/$(basename "$file")" ;;
		*) dest="$cache/include/$set.partial/${file#usr/include/}" ;;
		esac
		{ mkdir -p "$(dirname "$dest")" && mv "$tmp/$file" "$dest"; } || die "$who: cannot write $dest: check the cache folder (NCCLGO_CACHE)"
	done <<<"$lines"
	for set in "${sets[@]}"; do
		{ rm -rf "${cache:?}/$set" && mv "$cache/$set.partial" "$cache/$set" && touch "$cache/$set/.verified"; } ||
			die "$who: cannot write $cache/$set: check the cache folder (NCCLGO_CACHE)"
	done
}

# fetch_kernel_inputs: every "tool" and "include" set of the manifest.
fetch_kernel_inputs() {
	local -A todo=()
	local kind set pkg suite comp ver file sum url key
	while IFS=$'\t' read -r kind set pkg suite comp ver file sum url; do
		case "$kind" in tool | include) ;; *) continue ;; esac
		set_verified "$kind" "$set" && continue
		todo["$pkg"$'\t'"$ver"$'\t'"$suite/$comp"]+="$kind"$'\t'"$set"$'\t'"$file"$'\t'"$sum"$'\n'
	done <"$manifest"
	local -a keys=()
	if [ "${#todo[@]}" -gt 0 ]; then mapfile -t keys < <(printf '%s\n' "${!todo[@]}" | sort); fi
	for key in "${keys[@]}"; do
		IFS=$'\t' read -r pkg ver suite <<<"$key"
		kernel_extract "$pkg" "$ver" "$suite" "${todo[$key]%$'\n'}"
	done
}
# --- end of kernel checks -----------------------------------------------------------------

usage() { awk 'NR > 1 && (!/^#/ || /^# NCCLGO_MANIFEST/) {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0" >&2; }

case "${1:-}" in
path)
	echo "$cache/${2:?kind}/${3:?set}"
	exit 0
	;;
headers | libs | all | add | kernels) ;;
*)
	usage
	exit 2
	;;
esac
fetching=1
check_manifest
case "$1" in
headers) fetch_kind header ;;
libs) fetch_kind lib ;;
all)
	fetch_kind header
	fetch_kernel_inputs
	fetch_kind lib
	;;
add) add_nccl ;;
kernels)
	fetch_kind header
	fetch_kernel_inputs
	;;
esac
