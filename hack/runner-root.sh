#!/usr/bin/env bash
# Builds the root file system of the vm-runner image from Debian 13 (trixie)
# packages (extracted by hack/debian-root.sh) into DIR, and prints DIR.
# Without DIR it builds into a cache (~/.cache/vmop/images, keyed by the
# scripts) once per machine: ~1 minute.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

# What the runner and its templates use: qemu 10.0 for x86 with SeaBIOS and
# iPXE (its NIC option ROMs), the SPICE modules, qemu-block-extra for CD
# images given as URLs, qemu-utils for qemu-img (vm-runner import converts
# a disk's source image onto its claim) and qemu-nbd (kubectl vm snapshot), OVMF, swtpm (the runner runs it
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
	# qemu-utils' tools beside qemu-img and qemu-nbd (the snapshot pod's
	# NBD server).
	usr/bin/qemu-io usr/bin/qemu-storage-daemon
	# Data only shown to people (debian-root.sh drops documentation and
	# translations).
	usr/share/iso-codes usr/share/xml/iso-codes)

out=${1:-}
if [ -z "$out" ]; then
	. "$here/root-cache.sh"
	root_cache vm-runner-root usr/bin/qemu-system-x86_64
fi

tmp=$out.tmp
rm -rf "$tmp" "$out"
echo "building the vm-runner root into $out" >&2
"$here/debian-root.sh" "$tmp" "${packages[@]}" -- "${drop_packages[@]}"
for p in "${drop_paths[@]}"; do rm -rf "${tmp:?}/$p"; done
# Tap networks: qemu-bridge-helper may attach to any bridge the pod has.
mkdir -p "$tmp/etc/qemu"
echo "allow all" > "$tmp/etc/qemu/bridge.conf"
mv "$tmp" "$out"
echo "$out"
