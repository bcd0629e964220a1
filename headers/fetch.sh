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
		# Components other than contrib and non-free that the manifest pins (main for
		# Open MPI), only for the suites that pin them.
		awk -F'\t' '$1 !~ /^#/ && NF >= 8 && $5 != "contrib" && $5 != "non-free" {print $4, $5}' "$manifest" | sort -u |
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

# fetch_kind KIND: fetch every manifest entry of KIND ("header" or "lib").
fetch_kind() {
	local want="$1" kind set pkg suite comp ver file sum dir dest
	while IFS=$'\t' read -r kind set pkg suite comp ver file sum; do
		case "$kind" in '#'* | '') continue ;; esac
		[ "$kind" = "$want" ] || continue
		dir="$cache/$kind/$set"
		dest="$dir/$(basename "$file")"
		# A set may pin several files (a header and the headers it includes): a header
		# counts as fetched only once its own file is there too.
		if [ -f "$dir/.verified" ] && { [ "$kind" = lib ] || [ -f "$dest" ]; }; then continue; fi
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

case "${1:-}" in
headers) fetch_kind header ;;
libs) fetch_kind lib ;;
all) fetch_kind header && fetch_kind lib ;;
add) add_nccl && fetch_kind header ;;
path) echo "$cache/${2:?kind}/${3:?set}" ;;
*) sed -n '2,13p' "$0" >&2; exit 2 ;;
esac
