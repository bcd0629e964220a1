#!/usr/bin/env bash
# deps.sh: install what `make test` needs beyond the README's prerequisites (Go 1.26, gcc,
# g++, make, git), so that `make test` passes on a fresh Debian 12 machine with nothing
# else typed. `make test` runs it first (`make deps`); it is quick when all is there.
#
#   Debian packages (bookworm main): openmpi-bin libopenmpi-dev (raw/mpi, the MPI tests
#   under mpirun), python3-torch (torch 1.13: TCPStore and torchrun interop), debootstrap
#   (the torch 2.x roots), ca-certificates.
#   The torch 2.x roots: .ci/torch-chroot.sh build trixie|sid (Debian trixie with torch
#   2.6, sid with torch 2.14; 1-7 minutes and 1-1.5 GB each the first time, cached under
#   $NCCLGO_CACHE, or reused from $NCCLGO_TORCH2_ROOT / $NCCLGO_TORCH_SID_ROOT).
#
# apt runs as root, else through sudo; without either it stops at once and prints the
# one command that installs the packages.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

pkgs=(openmpi-bin libopenmpi-dev python3-torch debootstrap ca-certificates)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

as_root() {
	if [ "$(id -u)" = 0 ]; then
		"$@"
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		sudo "$@"
	else
		return 99
	fi
}

if [ ${#missing[@]} -gt 0 ]; then
	echo "deps.sh: installing ${missing[*]} (Debian packages the tests use)"
	cmd=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}")
	rc=0
	as_root apt-get -o DPkg::Lock::Timeout=600 update -qq || rc=$?
	if [ "$rc" = 99 ]; then
		echo "deps.sh: installing packages needs root or password-less sudo; run this once, then make test again:" >&2
		echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
		exit 1
	fi
	[ "$rc" = 0 ] || { echo "deps.sh: apt-get update failed (exit $rc): see the lines above" >&2; exit 1; }
	as_root "${cmd[@]}" || { echo "deps.sh: apt-get install ${missing[*]} failed: see the lines above" >&2; exit 1; }
fi

# The torch 2.x roots need root (debootstrap, chroot, mount namespaces).
for suite in trixie sid; do
	dir="$("$here/torch-chroot.sh" dir "$suite")"
	[ -e "$dir/.ncclgo-ready" ] && continue
	if [ "$(id -u)" = 0 ]; then
		"$here/torch-chroot.sh" build "$suite"
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		sudo --preserve-env=NCCLGO_CACHE,NCCLGO_TORCH2_ROOT,NCCLGO_TORCH_SID_ROOT,NCCLGO_DEBIAN_MIRROR "$here/torch-chroot.sh" build "$suite"
	else
		echo "deps.sh: the torch $suite root ($dir) is missing and building it needs root; run this once, then make test again:" >&2
		echo "  sudo NCCLGO_CACHE=$NCCLGO_CACHE $here/torch-chroot.sh build $suite" >&2
		exit 1
	fi
done
