#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine: qemu and
# qemu-img (only a Recommends of qemu-system-x86), OVMF,
# swtpm, ISO tools, a kernel + busybox for a test guest from Debian,
# virt-viewer (remote-viewer), Xvfb and xwd (x11-apps) for the console test,
# mmdebstrap for the vm-runner image's Debian root, containerd, runc, the
# CNI plugins, iptables and nfacct (which removes the counters kube-proxy
# leaves in the kernel) for the test node that runs vmop's images,
# iproute2, nftables and tcpdump for the pod network's tests (network
# namespaces, the NAT rules read back, what leaves a pod), busybox's udhcpc for the DHCP server's,
# syslinux, mtools and dosfstools for the test guest's boot disk, GRUB's
# BIOS and EFI images and sfdisk for the Debian test guest's disk,
# openssh-client (ssh, ssh-keygen) for SSH into that guest, git (its
# http-backend serves the GitOps tests' repositories to Argo CD and Flux),
# Debian's chromium for the browser console's tests (driven headless with
# chromedp, no chromedriver needed), and etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the kubelet,
# kube-proxy and kwok built from the module proxy (cached after the first run). Safe to run again: it skips what is
# already there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

packages=(qemu-system-x86 qemu-utils ovmf swtpm swtpm-tools genisoimage util-linux busybox-static linux-image-amd64 xz-utils virt-viewer xvfb x11-apps mmdebstrap containerd runc containernetworking-plugins iptables nfacct iproute2 nftables tcpdump syslinux syslinux-common mtools dosfstools grub-pc-bin grub-efi-amd64-bin fdisk e2fsprogs openssh-client git chromium)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	echo "installing ${missing[*]}" >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

"$here/build-control-plane.sh" all >/dev/null
