#!/usr/bin/env bash
# Builds (once) and enters the Debian roots holding newer python3-torch, for the tests that
# check ncclgo against torch >= 2 (bookworm only has torch 1.13). Needs root.
#
#   .ci/torch-chroot.sh build [trixie|sid]    build the root (default trixie, torch 2.6;
#                                             sid: torch 2.14), ~10 min, ~1 GB each
#   .ci/torch-chroot.sh run [--root trixie|sid] CMD...
#                                             run CMD inside it, in a private mount namespace
#                                             with /proc and /dev mounted and /tmp shared
#   .ci/torch-chroot.sh dir [trixie|sid]      print the root's path
#
# The tests look for the trixie root at $NCCLGO_TORCH2_ROOT, else $NCCLGO_CACHE/torch-trixie,
# else ~/.cache/ncclgo/torch-trixie; for the sid root at $NCCLGO_TORCH_SID_ROOT, else
# $NCCLGO_CACHE/torch-sid, else ~/.cache/ncclgo/torch-sid. Both are plain roots: anything
# that needs torch 2.6 or 2.14 may use them.
set -euo pipefail
cache="${NCCLGO_CACHE:-$HOME/.cache/ncclgo}"
mirror="${NCCLGO_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
	mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
	mirror="${mirror:-http://deb.debian.org/debian}"
fi

# root_of SUITE: the root's path for a suite.
root_of() {
	case "$1" in
	trixie) echo "${NCCLGO_TORCH2_ROOT:-$cache/torch-trixie}" ;;
	sid) echo "${NCCLGO_TORCH_SID_ROOT:-$cache/torch-sid}" ;;
	*) echo "unknown suite $1: want trixie or sid" >&2; exit 2 ;;
	esac
}

apt_install() {
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@"
}

build() {
	local suite="$1" root
	root="$(root_of "$suite")"
	if [ -e "$root/.ncclgo-ready" ]; then
		echo "torch chroot ready at $root"
		return
	fi
	command -v debootstrap >/dev/null || { apt-get -o DPkg::Lock::Timeout=600 update -qq; apt_install debootstrap; }
	rm -rf "$root.tmp"
	mkdir -p "$(dirname "$root")"
	debootstrap --variant=minbase "$suite" "$root.tmp" "$mirror"
	# sid's Release file on some archives is past its Valid-Until: let apt inside the root
	# accept it, for this build and for whoever installs more there later.
	if [ "$suite" = sid ]; then
		echo 'Acquire::Check-Valid-Until "false";' >"$root.tmp/etc/apt/apt.conf.d/99ncclgo-valid-until"
	fi
	# Inside: only apt, no service starts. sid also gets python3-tabulate: torch 2.14's
	# fr_trace prints a coalesced group's mismatch with it and fails without it
	# (components/utils.py has no fallback).
	local pkgs=python3-torch
	if [ "$suite" = sid ]; then
		pkgs="$pkgs python3-tabulate"
	fi
	chroot "$root.tmp" /bin/sh -c "apt-get -o Acquire::Check-Valid-Until=false update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs && apt-get clean"
	chroot "$root.tmp" python3 -c 'import torch, torch.distributed; print("torch", torch.__version__)'
	touch "$root.tmp/.ncclgo-ready"
	rm -rf "$root"
	mv "$root.tmp" "$root"
	echo "torch chroot ready at $root"
}

run() {
	local suite=trixie root
	if [ "${1:-}" = --root ]; then
		suite="${2:?--root needs trixie or sid}"
		shift 2
	fi
	root="$(root_of "$suite")"
	[ -e "$root/.ncclgo-ready" ] || { echo "no torch chroot at $root: run $0 build $suite" >&2; exit 2; }
	# c10d resolves the host name: make it resolvable inside.
	local h
	h="$(hostname)"
	grep -qw -- "$h" "$root/etc/hosts" 2>/dev/null || echo "127.0.1.1 $h" >>"$root/etc/hosts"
	# A private mount namespace: the mounts vanish with the command.
	exec unshare --mount --propagation private -- /bin/sh -c '
		r="$1"; shift
		mount -t proc proc "$r/proc"
		mount --rbind /dev "$r/dev"
		mount --bind /tmp "$r/tmp"
		exec chroot "$r" "$@"' sh "$root" "$@"
}

case "${1:-}" in
build) build "${2:-trixie}" ;;
run) shift; run "$@" ;;
dir) root_of "${2:-trixie}" ;;
*) echo "usage: $0 build [trixie|sid] | run [--root trixie|sid] CMD... | dir [trixie|sid]" >&2; exit 2 ;;
esac
