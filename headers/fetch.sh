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
#                                       github or pypi picks one); pins it in the manifest
#
# Needs: apt-get and dpkg-deb (Debian's own) and go.
# Cache: $NCCLGO_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/ncclgo (the Makefile
# exports the same rule). NCCLGO_KEEP_DEBS=1 keeps the downloaded .debs.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
manifest="${NCCLGO_MANIFEST:-$here/manifest.tsv}"
cache="${NCCLGO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclgo}"
apt_dir="$cache/apt"
mirror="${NCCLGO_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
github_base="${NCCLGO_GITHUB_RAW:-https://raw.githubusercontent.com}"
pypi_base="${NCCLGO_PYPI:-https://pypi.org}"

die() { echo "fetch.sh: $*" >&2; exit 1; }

apt_opts() {
	echo "-o Dir::Etc::SourceList=$apt_dir/sources.list -o Dir::Etc::SourceParts=/dev/null" \
		"-o Dir::State::Lists=$apt_dir/lists -o Dir::Cache=$apt_dir/cache" \
		"-o Dir::State::status=/dev/null -o APT::Architecture=amd64 -o Debug::NoLocking=1" \
		"-o APT::Sandbox::User=root -q"
}

apt_ready=""
apt_update() {
	[ -n "$apt_ready" ] && return 0
	mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
	{
		for s in sid trixie bookworm; do
			echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $s contrib non-free"
		done
		# Components other than contrib and non-free that the manifest pins (main for
		# Open MPI), only for the suites that pin them.
		awk -F'\t' '$1 !~ /^#/ && NF >= 8 && $4 ~ /^(sid|trixie|bookworm)$/ && $5 != "contrib" && $5 != "non-free" {print $4, $5}' "$manifest" | sort -u |
			while read -r s c; do echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $s $c"; done
	} >"$apt_dir/sources.list"
	# shellcheck disable=SC2046
	apt-get $(apt_opts) update >"$apt_dir/update.log" 2>&1 || {
		cat "$apt_dir/update.log" >&2
		die "apt-get update against $mirror failed"
	}
	apt_ready=1
}

# served_versions PACKAGE: every version of PACKAGE the archive serves now, one a line.
served_versions() {
	# shellcheck disable=SC2046
	apt-cache $(apt_opts) madison "$1" 2>/dev/null | awk -F'|' '{gsub(/ /,"",$2); gsub(/^ +| +$/,"",$3); print $2" ("$3")"}'
}

# deb PACKAGE VERSION: path of the downloaded .deb (downloads it once).
deb() {
	local pkg="$1" ver="$2" f
	f="$apt_dir/debs/${pkg}_${ver//:/%3a}_amd64.deb"
	if [ ! -s "$f" ]; then
		apt_update
		# shellcheck disable=SC2046
		if ! (cd "$apt_dir/debs" && apt-get $(apt_opts) download "$pkg=$ver" >"$apt_dir/download.log" 2>&1); then
			echo "fetch.sh: pinned $pkg $ver is not served by $mirror any more; served now:" >&2
			served_versions "$pkg" | sed 's/^/  /' >&2
			die "update headers/manifest.tsv (NCCL=<version> headers/fetch.sh add) or pick a served version"
		fi
	fi
	echo "$f"
}

sha() { sha256sum "$1" | cut -d' ' -f1; }

# extract DEB FILE DEST: extract one file of a .deb to DEST.
extract() {
	local d="$1" file="$2" dest="$3" tmp
	tmp="$(mktemp -d)"
	dpkg-deb --fsys-tarfile "$d" | tar -x -C "$tmp" "./$file"
	mkdir -p "$(dirname "$dest")"
	mv "$tmp/$file" "$dest"
	rm -rf "$tmp"
}

# nvheader ARGS...: run headers/nvheader (built once per run).
nvheader_bin=""
nvheader() {
	if [ -z "$nvheader_bin" ]; then
		nvheader_bin="$(mktemp -d)/nvheader"
		(cd "$here/.." && go build -o "$nvheader_bin" ./headers/nvheader) || die "cannot build headers/nvheader"
	fi
	"$nvheader_bin" -github-base "$github_base" -pypi-base "$pypi_base" "$@"
}

# fetch_kind KIND: fetch every manifest entry of KIND ("header" or "lib").
unreachable=" "
fetch_kind() {
	local want="$1" kind set pkg suite comp ver file sum url dir dest
	while IFS=$'\t' read -r kind set pkg suite comp ver file sum url; do
		case "$kind" in '#'* | '') continue ;; esac
		[ "$kind" = "$want" ] || continue
		dir="$cache/$kind/$set"
		case "$suite" in
		github | pypi)
			if [ -f "$dir/.verified" ]; then continue; fi
			dest="$dir/$(basename "$file" .in)"
			case "$unreachable" in *" $suite "*) continue ;; esac
			mkdir -p "$dir"
			local v="${ver#v}" args=()
			v="${v%-*}"
			[ "$suite" = pypi ] && args=(-package "$pkg")
			echo "fetch.sh: $set: $suite $pkg $ver -> $dest" >&2
			local rc=0
			nvheader -source "$suite" -version "$v" -tag "$ver" "${args[@]}" -sha256 "$sum" -out "$dest" >/dev/null || rc=$?
			if [ "$rc" = 3 ]; then
				unreachable+="$suite "
				echo "fetch.sh: $set and the other $suite sets not fetched ($suite cannot be reached from here): tools/bindgen reads them from gen/snapshot (their committed snapshots)" >&2
				continue
			fi
			[ "$rc" = 0 ] || die "$set: $suite gave no nccl.h matching headers/manifest.tsv (see above)"
			touch "$dir/.verified"
			continue
			;;
		esac
		dest="$dir/$(basename "$file")"
		# A set may pin several files (a header and the headers it includes): a header
		# counts as fetched only once its own file is there too.
		if [ -f "$dir/.verified" ] && { [ "$kind" = lib ] || [ -f "$dest" ]; }; then continue; fi
		echo "fetch.sh: $set: $pkg $ver ($suite/$comp) -> $dest" >&2
		extract "$(deb "$pkg" "$ver")" "$file" "$dest"
		local got
		got="$(sha "$dest")"
		[ "$got" = "$sum" ] || die "$set: $file has sha256 $got, manifest pins $sum"
		if [ "$kind" = lib ]; then prepare_lib "$set" "$dir" "$dest" || die "$set: preparing $dest failed"; fi
		touch "$dir/.verified"
	done <"$manifest"
}

# drop_debs: delete the downloaded .debs (hundreds of MB; only a few files of them are
# kept), unless NCCLGO_KEEP_DEBS is set.
drop_debs() {
	[ -n "${NCCLGO_KEEP_DEBS:-}" ] && return 0
	rm -f "$apt_dir"/debs/*.deb "$apt_dir"/cache/archives/*.deb 2>/dev/null || true
}

# prepare_lib SET DIR FILE: soname links; for libnccl the bookworm patch of sources.md.
prepare_lib() {
	local set="$1" dir="$2" file="$3" soname
	soname="$(cd "$here/.." && go run ./headers/patchlib -soname "$file")"
	case "$set" in
	nccl-*)
		# Debian's libnccl references six C23 functions of glibc 2.38; bookworm has 2.36.
		# patchlib renames each reference to the classic function (the same for the
		# decimal and hex input NCCL parses), clears its version and marks the GLIBC_2.38
		# requirement weak: no patchelf, no shim library.
		local syms="__isoc23_sscanf __isoc23_fscanf __isoc23_strtol __isoc23_strtoll __isoc23_strtoul __isoc23_strtoull"
		local renames="__isoc23_sscanf=sscanf,__isoc23_fscanf=fscanf,__isoc23_strtol=strtol,__isoc23_strtoll=strtoll,__isoc23_strtoul=strtoul,__isoc23_strtoull=strtoull"
		cp "$file" "$dir/libnccl.so.2"
		# shellcheck disable=SC2086
		(cd "$here/.." && go run ./headers/patchlib -weak GLIBC_2.38 -rename "$renames" "$dir/libnccl.so.2" $syms) || return 1
		rm -f "$file"
		;;
	*)
		[ -n "$soname" ] && ln -sf "$(basename "$file")" "$dir/$soname"
		;;
	esac
}

# add: take a new NCCL release ($NCCL) into the manifest: Debian if it serves the release
# (or NCCL_SOURCE=debian), else NVIDIA/nccl's tag (github), else the wheel (pypi).
add_nccl() {
	local v="${NCCL:?set NCCL=<version>, e.g. NCCL=2.30.7}" src="${NCCL_SOURCE:-}" line ver suite tmp
	grep -q "^header	nccl-$v	" "$manifest" && die "nccl-$v is already pinned"
	tmp="$(mktemp)"
	if [ -z "$src" ] || [ "$src" = debian ]; then
		apt_update
		line="$(served_versions libnccl-dev | grep "^$v-" | head -1)" || true
		if [ -n "$line" ]; then
			ver="${line%% *}"
			suite="$(echo "$line" | sed -E 's/.*\(([a-z-]+)\/.*/\1/')"
			extract "$(deb libnccl-dev "$ver")" usr/include/nccl.h "$tmp"
			drop_debs
			printf 'header\tnccl-%s\tlibnccl-dev\t%s\tcontrib\t%s\tusr/include/nccl.h\t%s\n' "$v" "$suite" "$ver" "$(sha "$tmp")" >>"$manifest"
			rm -f "$tmp"
			echo "fetch.sh: pinned nccl-$v ($ver from Debian $suite) in headers/manifest.tsv; now append it to sets in gen/nccl.json and run make generate" >&2
			return 0
		fi
		echo "fetch.sh: Debian does not serve libnccl-dev $v; it serves:" >&2
		served_versions libnccl-dev | sed 's/^/  /' >&2
		[ "$src" = debian ] && exit 1
	fi
	for s in github pypi; do
		[ -n "$src" ] && [ "$src" != "$s" ] && continue
		local pkgs=("")
		[ "$s" = pypi ] && pkgs=(nvidia-nccl-cu12 nvidia-nccl-cu13)
		for p in "${pkgs[@]}"; do
			local args=()
			[ -n "$p" ] && args=(-package "$p")
			if line="$(nvheader -source "$s" -version "$v" "${args[@]}" -out "$tmp")"; then
				echo "$line" >>"$manifest"
				rm -f "$tmp"
				echo "fetch.sh: pinned nccl-$v from $s in headers/manifest.tsv; now append it to sets in gen/nccl.json and run make generate" >&2
				return 0
			fi
		done
	done
	rm -f "$tmp"
	die "NCCL $v could not be had from ${src:-Debian, github or pypi}"
}

# --- kernel checks (kernels/): ptxas, CUDA's fp16/bf16 headers, libcu++'s <nv/target> -------
#   headers/fetch.sh kernels   fetch the manifest's "tool" and "include" sets (make kernel-inputs)
# A "tool" file is cached as <cache>/tool/<set>/<file name>, an "include" file as
# <cache>/include/<set>/<its path below usr/include>; every file of a set comes from one package.
# Each .deb is read once for all the files taken from it. The kernels command fetches the
# header sets first in the same run, so the nvidia-cuda-dev .deb that cuda.h and the fp16
# headers share is downloaded once; the run deletes the .debs at its end (drop_debs).

# kernel_sources: the private source list with bookworm main too (libcu++-dev is there).
kernel_sources() {
	apt_update
	grep -q " bookworm main\$" "$apt_dir/sources.list" && return 0
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm main" >>"$apt_dir/sources.list"
	# shellcheck disable=SC2046
	apt-get $(apt_opts) update >"$apt_dir/update.log" 2>&1 || {
		cat "$apt_dir/update.log" >&2
		die "apt-get update against $mirror (bookworm main) failed"
	}
}

# kernel_deb_file PACKAGE VERSION: the cached .deb of PACKAGE VERSION (any architecture), if any.
kernel_deb_file() {
	local f
	for f in "$apt_dir/debs/${1}_${2//:/%3a}_"*.deb; do
		[ -s "$f" ] && echo "$f" && return 0
	done
	return 0
}

set_verified() { [ -f "$cache/$1/$2/.verified" ]; }

# kernel_extract PACKAGE VERSION LINES: extract, verify and cache the files of LINES
# ("kind<TAB>set<TAB>file<TAB>sha256", one a line) from one .deb, in one pass.
kernel_extract() {
	local pkg="$1" ver="$2" lines="$3" d tmp kind set file sum got dest
	d="$(kernel_deb_file "$pkg" "$ver")"
	if [ -z "$d" ]; then
		kernel_sources
		deb "$pkg" "$ver" >/dev/null
		d="$(kernel_deb_file "$pkg" "$ver")"
		[ -n "$d" ] || die "$pkg $ver: apt-get download left no .deb in $apt_dir/debs"
	fi
	local -a members=() sets=()
	while IFS=$'\t' read -r kind set file sum; do
		members+=("./$file")
		[[ " ${sets[*]} " == *" $kind/$set "* ]] || sets+=("$kind/$set")
	done <<<"$lines"
	echo "fetch.sh: ${sets[*]}: ${#members[@]} files from $pkg $ver" >&2
	tmp="$(mktemp -d)"
	dpkg-deb --fsys-tarfile "$d" | tar -x -C "$tmp" "${members[@]}" || { rm -rf "$tmp"; die "$pkg $ver: extracting ${members[*]} failed"; }
	for set in "${sets[@]}"; do rm -rf "$cache/$set.partial"; done
	while IFS=$'\t' read -r kind set file sum; do
		got="$(sha "$tmp/$file")"
		[ "$got" = "$sum" ] || { rm -rf "$tmp"; die "$set: $file has sha256 $got, manifest pins $sum"; }
		case "$kind" in
		tool) dest="$cache/tool/$set.partial/$(basename "$file")" ;;
		*) dest="$cache/include/$set.partial/${file#usr/include/}" ;;
		esac
		mkdir -p "$(dirname "$dest")"
		mv "$tmp/$file" "$dest"
	done <<<"$lines"
	rm -rf "$tmp"
	for set in "${sets[@]}"; do
		rm -rf "${cache:?}/$set"
		mv "$cache/$set.partial" "$cache/$set"
		touch "$cache/$set/.verified"
	done
}

# fetch_kernel_inputs: every "tool" and "include" set of the manifest.
fetch_kernel_inputs() {
	local -A todo=()
	local kind set pkg suite comp ver file sum url key
	while IFS=$'\t' read -r kind set pkg suite comp ver file sum url; do
		case "$kind" in tool | include) ;; *) continue ;; esac
		set_verified "$kind" "$set" && continue
		todo["$pkg"$'\t'"$ver"]+="$kind"$'\t'"$set"$'\t'"$file"$'\t'"$sum"$'\n'
	done <"$manifest"
	while IFS= read -r key; do
		[ -n "$key" ] || continue
		kernel_extract "${key%%$'\t'*}" "${key#*$'\t'}" "${todo[$key]%$'\n'}"
	done <<<"$(printf '%s\n' "${!todo[@]}" | sort)"
}
# --- end of kernel checks -----------------------------------------------------------------

case "${1:-}" in
headers) fetch_kind header && drop_debs ;;
libs) fetch_kind lib && drop_debs ;;
all) fetch_kind header && fetch_kernel_inputs && fetch_kind lib && drop_debs ;;
add) add_nccl && fetch_kind header ;;
kernels) fetch_kind header && fetch_kernel_inputs && drop_debs ;;
path) echo "$cache/${2:?kind}/${3:?set}" ;;
*) sed -n '2,23p' "$0" >&2; exit 2 ;;
esac
