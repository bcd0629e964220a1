#!/usr/bin/env bash
# Builds (once) and enters a Debian trixie root holding python3-torch 2.x, for the tests
# that check ncclgo against torch >= 2 (bookworm only has torch 1.13). Needs root.
#
#   .ci/torch-chroot.sh build          build $NCCLGO_CACHE/torch-trixie (~10 min, ~1 GB)
#   .ci/torch-chroot.sh run CMD...     run CMD inside it, in a private mount namespace
#                                      with /proc and /dev mounted and /tmp shared
#   .ci/torch-chroot.sh dir            print the root's path
#
# The tests look for the root at $NCCLGO_TORCH2_ROOT, else $NCCLGO_CACHE/torch-trixie,
# else ~/.cache/ncclgo/torch-trixie.
set -euo pipefail
cache="${NCCLGO_CACHE:-$HOME/.cache/ncclgo}"
root="${NCCLGO_TORCH2_ROOT:-$cache/torch-trixie}"
mirror="${NCCLGO_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
	mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
	mirror="${mirror:-http://deb.debian.org/debian}"
fi

apt_install() {
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@"
}

build() {
	if [ -e "$root/.ncclgo-ready" ]; then
		echo "torch chroot ready at $root"
		return
	fi
	command -v debootstrap >/dev/null || { apt-get -o DPkg::Lock::Timeout=600 update -qq; apt_install debootstrap; }
	rm -rf "$root.tmp"
	mkdir -p "$(dirname "$root")"
	debootstrap --variant=minbase trixie "$root.tmp" "$mirror"
	# Inside: only apt, no service starts.
	chroot "$root.tmp" /bin/sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch && apt-get clean"
	chroot "$root.tmp" python3 -c 'import torch, torch.distributed; print("torch", torch.__version__)'
	touch "$root.tmp/.ncclgo-ready"
	rm -rf "$root"
	mv "$root.tmp" "$root"
	echo "torch chroot ready at $root"
}

run() {
	[ -e "$root/.ncclgo-ready" ] || { echo "no torch chroot at $root: run $0 build" >&2; exit 2; }
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
build) build ;;
run) shift; run "$@" ;;
dir) echo "$root" ;;
*) echo "usage: $0 build | run CMD... | dir" >&2; exit 2 ;;
esac
