#!/usr/bin/env bash
# Builds the Debian 12 guest of the tests (test/harness/debianguest): a 2 GiB
# sparse raw disk that boots with BIOS (SeaBIOS) and UEFI (OVMF), made from
# Debian's packages with no loop device and no mount.
#
#   hack/debian-guest.sh OUT.raw
#
# Root (mmdebstrap's root mode). Inside: Debian's generic kernel (the cloud
# kernel has no AHCI or CD-ROM driver: the VM's CD drives would be
# missing), without the modules of hardware no VM has (NICs but virtio,
# SCSI HBAs, sound, GPUs, wireless) and of file systems it does not use,
# and without documentation; systemd,
# cloud-init (NoCloud only), qemu-guest-agent, OpenSSH, spice-vdagent,
# tpm2-tools, and a udev rule that onlines hot-plugged CPUs. The guest
# sends nothing off its host: no NTP client, no package updates, no network
# datasources. Partitions: BIOS boot (GRUB's core.img), ESP (GRUB for
# x86_64 EFI as the removable-media path), root (ext4). GRUB images come
# from the host's grub-pc-bin and grub-efi-amd64-bin.
#
# Fixed UUIDs, file times and hash seeds keep the layout the same from run
# to run; package versions are those of the mirror on the day.
set -euo pipefail
out=${1:?usage: hack/debian-guest.sh OUT.raw}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
export E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH

disk_uuid=6d0b7d43-7a4e-4b0c-9a8a-000000000000
root_partuuid=6d0b7d43-7a4e-4b0c-9a8a-000000000003
root_fsuuid=6d0b7d43-7a4e-4b0c-9a8a-0000000000f3
esp_volid=0D0B7D43

work=$(mktemp -d "${TMPDIR:-/tmp}/debian-guest.XXXXXX")
# --one-file-system: never into what an interrupted mmdebstrap left mounted
trap 'rm -rf --one-file-system "$work"' EXIT
root=$work/root

# The mirror the host's apt uses (the only network these machines reach).
sources=$(ls /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
mirror=$(cat $sources /dev/null | grep -oE '^(deb|URIs:) +(\[[^]]*\] +)?https?://[^ ]+' |
	grep -oE 'https?://[^ ]+' | grep -E '/debian/?$' | head -1 || true)
mirror=${mirror:-http://deb.debian.org/debian}

mmdebstrap --mode=root --variant=apt --format=directory \
	--aptopt='APT::Install-Recommends "false"' \
	--include=linux-image-amd64,initramfs-tools,systemd-sysv,udev,dbus,e2fsprogs,cloud-init,cloud-guest-utils,qemu-guest-agent,openssh-server,sudo,spice-vdagent,tpm2-tools,iproute2,util-linux,locales \
	--customize-hook='chroot "$1" systemctl enable systemd-networkd' \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
	--customize-hook='for d in "$1"/lib/modules/*/kernel; do
		(cd "$d" && rm -rf sound drivers/media drivers/net/wireless drivers/net/ethernet drivers/infiniband drivers/staging \
			drivers/bluetooth drivers/isdn drivers/iio drivers/gpu/drm/amd drivers/gpu/drm/nouveau drivers/gpu/drm/radeon \
			drivers/gpu/drm/i915 drivers/scsi/*/ net/wireless net/mac80211 net/bluetooth \
			fs/btrfs fs/xfs fs/ocfs2 fs/gfs2 fs/ceph fs/nfs fs/nfsd fs/smb fs/jfs fs/nilfs2 fs/f2fs fs/ubifs fs/reiserfs)
		chroot "$1" depmod -a "$(basename "$(dirname "$d")")"
	done' \
	--customize-hook='chroot "$1" systemctl mask apt-daily.timer apt-daily-upgrade.timer' \
	bookworm "$root" "$mirror" >&2

kver=$(basename "$(ls "$root"/boot/vmlinuz-*)")
kver=${kver#vmlinuz-}

cat >"$root/etc/fstab" <<EOF
PARTUUID=$root_partuuid / ext4 errors=remount-ro 0 1
EOF
: >"$root/etc/hostname"
: >"$root/etc/machine-id"
rm -f "$root"/etc/ssh/ssh_host_* # cloud-init makes the guest's own
mkdir -p "$root/var/log/journal" # a persistent journal: the tests read the previous boot's
# CPUs qemu hot-plugs come up offline; online them (VM-Operator's runner
# page names this rule).
cat >"$root/etc/udev/rules.d/80-hotplug-cpu.rules" <<'EOF'
SUBSYSTEM=="cpu", ACTION=="add", TEST=="online", ATTR{online}=="0", ATTR{online}="1"
EOF
# spice-vdagentd is socket-activated by a desktop session's agent; start it
# with its port (a VM with a SPICE display), so that it runs before one.
# Not only on "add": a port may get its name after it was added, with a
# "change" event (qemu-guest-agent's own rule matches any action; with
# ACTION=="add" the daemon stayed down in 1 of 7 boots).
cat >"$root/etc/udev/rules.d/80-spice-vdagentd.rules" <<'EOF'
ACTION!="remove", SUBSYSTEM=="virtio-ports", ATTR{name}=="com.redhat.spice.0", TAG+="systemd", ENV{SYSTEMD_WANTS}+="spice-vdagentd.service"
EOF
# systemd-networkd-wait-online waits 2 minutes for a link that nobody
# configures (a VM without a NIC, or with one cloud-init leaves alone),
# and cloud-init's network stage waits for it.
mkdir -p "$root/etc/systemd/system/systemd-networkd-wait-online.service.d"
cat >"$root/etc/systemd/system/systemd-networkd-wait-online.service.d/vmop.conf" <<'EOF'
[Service]
ExecStart=
ExecStart=/lib/systemd/systemd-networkd-wait-online --any --timeout=10
EOF
cat >"$root/etc/cloud/cloud.cfg.d/90-vmop.cfg" <<'EOF'
# The seed disk vm-runner attaches, nothing from the network.
datasource_list: [NoCloud, None]
# cloud-init's default, en_US.UTF-8, would need locale-gen; C.UTF-8 is
# built in.
locale: C.UTF-8
EOF
mkdir -p "$root/boot/grub"
cat >"$root/boot/grub/grub.cfg" <<EOF
set timeout=0
linux /boot/vmlinuz-$kver root=PARTUUID=$root_partuuid ro console=tty0 console=ttyS0,115200n8
initrd /boot/initrd.img-$kver
boot
EOF
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*

# Layout in 512-byte sectors: BIOS boot at 1 MiB, ESP at 2 MiB (32 MiB),
# root from 34 MiB to the end.
size=$((2 << 30))
bios_start=2048 bios_size=2048
esp_start=4096 esp_size=65536
root_start=69632
img=$work/disk.raw
truncate -s "$size" "$img"
sfdisk --no-reread --no-tell-kernel -q "$img" <<EOF
label: gpt
label-id: $disk_uuid
first-lba: 2048
start=$bios_start, size=$bios_size, type=21686148-6449-6E6F-744E-656564454649, uuid=6d0b7d43-7a4e-4b0c-9a8a-000000000001, name=bios
start=$esp_start, size=$esp_size, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, uuid=6d0b7d43-7a4e-4b0c-9a8a-000000000002, name=esp
start=$root_start, type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, uuid=$root_partuuid, name=root
EOF
root_sectors=$(sfdisk -q -l -o Start,Sectors "$img" | awk -v s=$root_start '$1 == s {print $2}')

# GRUB 2.06 cannot read ext4's metadata_csum_seed or orphan_file.
mkfs.ext4 -q -F -b 4096 -L debian-root -U "$root_fsuuid" -O ^metadata_csum_seed,^orphan_file \
	-E offset=$((root_start * 512)),hash_seed=$root_fsuuid,root_owner=0:0 \
	-d "$root" "$img" $((root_sectors / 8))

# GRUB finds the root by its UUID (the VM may have other disks first).
cat >"$work/early.cfg" <<EOF
search --no-floppy --fs-uuid --set=root $root_fsuuid
set prefix=(\$root)/boot/grub
EOF
modules="part_gpt ext2 search search_fs_uuid normal linux configfile echo test"
grub-mkimage -O x86_64-efi -c "$work/early.cfg" -p /boot/grub -o "$work/BOOTX64.EFI" $modules efi_gop all_video
mkfs.fat -F 16 -n ESP -i $esp_volid --invariant --offset $esp_start "$img" $((esp_size / 2)) >/dev/null
export MTOOLS_SKIP_CHECK=1
mmd -i "$img@@$((esp_start * 512))" ::/EFI ::/EFI/BOOT
mcopy -i "$img@@$((esp_start * 512))" "$work/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI

# BIOS: what grub-bios-setup does, which refuses image files: core.img in
# the BIOS boot partition, its first sector's block list pointing at the
# rest, and boot.img in the MBR's code area pointing at core.img.
grub-mkimage -O i386-pc -c "$work/early.cfg" -p /boot/grub -o "$work/core.img" biosdisk $modules
core_sectors=$((($(stat -c %s "$work/core.img") + 511) / 512))
[ "$core_sectors" -le "$bios_size" ] || { echo "core.img does not fit the BIOS boot partition" >&2; exit 1; }
le() { # le VALUE BYTES: VALUE little-endian
	local v=$1 i out=""
	for ((i = 0; i < $2; i++)); do out+=$(printf '\\x%02x' $(((v >> (8 * i)) & 255))); done
	printf "$out"
}
patch() { dd of="$1" bs=1 seek="$2" conv=notrunc status=none; } # patch FILE OFFSET < bytes
# diskboot's block list (12 bytes at the end of its sector: start, length,
# segment), then an empty terminator before it.
{ le $((bios_start + 1)) 8; le $((core_sectors - 1)) 2; le $((0x820)) 2; } | patch "$work/core.img" 500
le 0 12 | patch "$work/core.img" 488
dd if="$work/core.img" of="$img" bs=512 seek=$bios_start conv=notrunc status=none
cp /usr/lib/grub/i386-pc/boot.img "$work/boot.img"
le $bios_start 8 | patch "$work/boot.img" $((0x5c)) # kernel sector
printf '\xff' | patch "$work/boot.img" $((0x64))     # boot drive: the BIOS's
printf '\x90\x90' | patch "$work/boot.img" $((0x66)) # hard disk: no drive check
dd if="$work/boot.img" of="$img" bs=440 count=1 conv=notrunc status=none

mv "$img" "$out"
echo "$out: Debian 12, kernel $kver" >&2
