#!/usr/bin/env bash
# Builds the root file system of the vm-runner image from Debian 13 (trixie)
# packages with mmdebstrap into DIR, and prints DIR. Without DIR it builds
# into a cache (~/.cache/vmop/images, keyed by this script) once per
# machine: ~1 minute. The packages are extracted, not installed: no
# maintainer script runs, so no shell, apt or dpkg is needed in the image,
# and the few files those scripts would make are made here.
#
# The mirror is the one the machine's apt uses (VMOP_DEBIAN_MIRROR
# overrides it); the suites are trixie, trixie-updates and trixie-security.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

# What the runner and its templates use: qemu 10.0 for x86 with SeaBIOS and
# iPXE (its NIC option ROMs), the SPICE modules, qemu-block-extra for CD
# images given as URLs, qemu-utils for qemu-img (vm-runner import converts
# a disk's source image onto its claim), OVMF, swtpm (the runner runs it
# directly; swtpm_setup from swtpm-tools is not used), CA certificates for
# https URLs, base-files for the /bin, /lib, /lib64 links and
# /etc/os-release.
packages=(base-files qemu-system-x86 qemu-system-modules-spice qemu-block-extra qemu-utils ovmf swtpm ca-certificates)

# Packages that come with those by dependency but that nothing the runner
# starts loads; their files are left out. OpenGL rendering (virgl), which
# needs a GPU render node and a desktop image: mesa's drivers and LLVM
# (~190 MB). Ceph and GlusterFS disks, which VMs on Kubernetes get as
# volumes, not through qemu (~45 MB). The account and admin tools that
# maintainer scripts would run.
drop_packages=(mesa-libgallium libllvm19 libz3-4
	librbd1 librados2 libgfapi0 libgfrpc0 libgfxdr0 libglusterfs0 libboost-iostreams1.83.0 libboost-thread1.83.0
	adduser passwd debconf login.defs libcap2-bin dmsetup openssl mawk)
# Files of kept packages that need a dropped package: qemu modules for
# those disks and GPUs, and mesa's GBM backend.
drop_paths=(usr/lib/x86_64-linux-gnu/qemu/block-rbd.so usr/lib/x86_64-linux-gnu/qemu/block-gluster.so
	usr/lib/x86_64-linux-gnu/gbm
	# qemu-utils' tools beside qemu-img.
	usr/bin/qemu-io usr/bin/qemu-nbd usr/bin/qemu-storage-daemon
	# Documentation, translations, and data only shown to people.
	usr/share/doc usr/share/man usr/share/info usr/share/locale usr/share/lintian usr/share/bug
	usr/share/iso-codes usr/share/xml/iso-codes
	# What apt left, and the host's files mmdebstrap copies in.
	etc/apt var/lib/apt var/cache var/log etc/resolv.conf etc/hostname)

key=$(cat "$0" "$here/runner-root-hook.sh" | sha256sum | cut -c1-16)
out=${1:-}
if [ -z "$out" ]; then
	cache=${VMOP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmop}/images
	out=$cache/vm-runner-root-$key
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
	if [ -e "$out/usr/bin/qemu-system-x86_64" ]; then
		echo "$out"
		exit 0
	fi
fi

mirror=${VMOP_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
	[ -n "$mirror" ] || mirror=$(sed -n 's/^deb[[:space:]]\+\(http[^[:space:]]*\/debian\)\/*[[:space:]].*/\1/p' /etc/apt/sources.list 2>/dev/null | head -1)
	[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
fi

command -v mmdebstrap >/dev/null || { echo "mmdebstrap not found: run hack/install-deps.sh" >&2; exit 1; }
tmp=$out.tmp
rm -rf "$tmp" "$out"
mkdir -p "$(dirname "$out")"
echo "building the vm-runner root from trixie at $mirror into $out" >&2
# A fixed time: the root changes only when its packages do, so its layer
# is shared between vmop versions.
SOURCE_DATE_EPOCH=1767225600 mmdebstrap --quiet --variant=extract \
	--include="$(IFS=,; echo "${packages[*]}")" \
	--extract-hook="$here/runner-root-hook.sh \"\$1\" ${drop_packages[*]}" \
	trixie "$tmp" \
	"deb $mirror trixie main" "deb $mirror trixie-updates main" "deb ${mirror%/debian}/debian-security trixie-security main" >&2
for p in "${drop_paths[@]}"; do rm -rf "${tmp:?}/$p"; done
mv "$tmp" "$out"
echo "$out"
