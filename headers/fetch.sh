#!/usr/bin/env bash
# fetch.sh: download the pinned NVIDIA headers and libraries of headers/manifest.tsv from
# Debian's archive into a cache outside the repository, verify their checksums, and (for
# the libraries) make Debian's libnccl loadable on Debian 12. Nothing is installed and the
# machine's apt sources are never changed: apt runs with a private source list and state.
#
#   headers/fetch.sh headers            header sets (for tools/bindgen)
#   headers/fetch.sh libs               libraries (for the tests)
#   headers/fetch.sh path KIND SET      print the cached folder of one set
#   NCCL=2.30.1 headers/fetch.sh add    take a new NCCL release: fetch its nccl.h, add it
#                                       to the manifest (then run `make generate`)
#
# Cache: $NCCLGO_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/ncclgo.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
manifest="$here/manifest.tsv"
cache="${NCCLGO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ncclgo}"
apt_dir="$cache/apt"
mirror="${NCCLGO_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

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

# fetch_kind KIND: fetch every manifest entry of KIND ("header" or "lib").
fetch_kind() {
	local want="$1" kind set pkg suite comp ver file sum dir dest
	while IFS=$'\t' read -r kind set pkg suite comp ver file sum; do
		case "$kind" in '#'* | '') continue ;; esac
		[ "$kind" = "$want" ] || continue
		dir="$cache/$kind/$set"
		dest="$dir/$(basename "$file")"
		if [ -f "$dir/.verified" ]; then continue; fi
		echo "fetch.sh: $set: $pkg $ver ($suite/$comp) -> $dest" >&2
		extract "$(deb "$pkg" "$ver")" "$file" "$dest"
		local got
		got="$(sha "$dest")"
		[ "$got" = "$sum" ] || die "$set: $file has sha256 $got, manifest pins $sum"
		if [ "$kind" = lib ]; then prepare_lib "$set" "$dir" "$dest"; fi
		touch "$dir/.verified"
	done <"$manifest"
}

# prepare_lib SET DIR FILE: soname links; for libnccl the bookworm patch of sources.md.
prepare_lib() {
	local set="$1" dir="$2" file="$3" soname
	soname="$(objdump -p "$file" 2>/dev/null | awk '/SONAME/{print $2}')"
	case "$set" in
	nccl-*)
		command -v patchelf >/dev/null || die "patchelf is needed to prepare $set (apt-get install patchelf)"
		local syms="__isoc23_sscanf __isoc23_fscanf __isoc23_strtol __isoc23_strtoll __isoc23_strtoul __isoc23_strtoull"
		gcc -shared -fPIC -O2 -o "$dir/libncclgo_glibc_shim.so" "$here/glibc_shim.c"
		cp "$file" "$dir/libnccl.so.2"
		# shellcheck disable=SC2086
		(cd "$here/.." && go run ./headers/patchlib -weak GLIBC_2.38 "$dir/libnccl.so.2" $syms)
		patchelf --add-needed libncclgo_glibc_shim.so "$dir/libnccl.so.2"
		patchelf --set-rpath '$ORIGIN' "$dir/libnccl.so.2"
		rm -f "$file"
		;;
	*)
		[ -n "$soname" ] && ln -sf "$(basename "$file")" "$dir/$soname"
		;;
	esac
}

# add: take a new NCCL release ($NCCL) into the manifest.
add_nccl() {
	local v="${NCCL:?set NCCL=<version>, e.g. NCCL=2.30.1}" line ver suite
	grep -q "^header	nccl-$v	" "$manifest" && die "nccl-$v is already pinned"
	apt_update
	line="$(served_versions libnccl-dev | grep "^$v-" | head -1)" || true
	[ -n "$line" ] || {
		echo "fetch.sh: libnccl-dev $v is not served; served now:" >&2
		served_versions libnccl-dev | sed 's/^/  /' >&2
		exit 1
	}
	ver="${line%% *}"
	suite="$(echo "$line" | sed -E 's/.*\(([a-z-]+)\/.*/\1/')"
	local tmp
	tmp="$(mktemp)"
	extract "$(deb libnccl-dev "$ver")" usr/include/nccl.h "$tmp"
	printf 'header\tnccl-%s\tlibnccl-dev\t%s\tcontrib\t%s\tusr/include/nccl.h\t%s\n' "$v" "$suite" "$ver" "$(sha "$tmp")" >>"$manifest"
	rm -f "$tmp"
	echo "fetch.sh: pinned nccl-$v ($ver from $suite) in headers/manifest.tsv; now add it to gen/ and run make generate" >&2
}

# --- kernel checks (kernels/): ptxas, CUDA's fp16/bf16 headers, libcu++'s <nv/target> -------
#   headers/fetch.sh kernels   fetch the manifest's "tool" and "include" sets (make kernel-inputs)
# A "tool" file is cached as <cache>/tool/<set>/<file name>, an "include" file as
# <cache>/include/<set>/<its path below usr/include>; every file of a set comes from one package.
# Each .deb is read once for all the files taken from it, and deleted as soon as every set of
# the manifest that comes from it is verified (so the nvidia-cuda-dev .deb that the cuda
# header set also reads goes once both are cached).

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

# prune_deb PACKAGE VERSION: delete the cached .deb unless a set of the manifest that comes
# from it is not verified yet.
prune_deb() {
	local pkg="$1" ver="$2" kind set p v f
	while IFS=$'\t' read -r kind set p _ _ v _; do
		case "$kind" in '#'* | '') continue ;; esac
		if [ "$p" = "$pkg" ] && [ "$v" = "$ver" ] && ! set_verified "$kind" "$set"; then return 0; fi
	done <"$manifest"
	f="$(kernel_deb_file "$pkg" "$ver")"
	if [ -n "$f" ]; then
		rm -f "$f"
		echo "fetch.sh: deleted $(basename "$f"): every set taken from it is cached" >&2
	fi
}

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
	local kind set pkg suite comp ver file sum key pkgs=""
	while IFS=$'\t' read -r kind set pkg suite comp ver file sum; do
		case "$kind" in tool | include) ;; *) continue ;; esac
		pkgs+="$pkg"$'\t'"$ver"$'\n'
		set_verified "$kind" "$set" && continue
		todo["$pkg"$'\t'"$ver"]+="$kind"$'\t'"$set"$'\t'"$file"$'\t'"$sum"$'\n'
	done <"$manifest"
	while IFS= read -r key; do
		[ -n "$key" ] || continue
		kernel_extract "${key%%$'\t'*}" "${key#*$'\t'}" "${todo[$key]%$'\n'}"
	done <<<"$(printf '%s\n' "${!todo[@]}" | sort)"
	while IFS=$'\t' read -r pkg ver; do
		[ -n "$pkg" ] && prune_deb "$pkg" "$ver"
	done <<<"$(printf '%s' "$pkgs" | sort -u)"
}
# --- end of kernel checks -----------------------------------------------------------------

case "${1:-}" in
headers) fetch_kind header ;;
libs) fetch_kind lib ;;
all) fetch_kind header && fetch_kind lib ;;
add) add_nccl && fetch_kind header ;;
kernels) fetch_kernel_inputs ;;
path) echo "$cache/${2:?kind}/${3:?set}" ;;
*) sed -n '2,13p' "$0" >&2; exit 2 ;;
esac
