#!/usr/bin/env bash
# Extracts Debian 13 (trixie) packages with mmdebstrap into DIR, a new
# directory, as an image's root file system:
#   debian-root.sh DIR PACKAGE... [-- DROP_PACKAGE...]
# The packages and what they depend on are extracted, not installed: no
# maintainer script runs, so no shell, apt or dpkg is needed in the image,
# and the few files those scripts would make are made by
# debian-root-hook.sh. The DROP_PACKAGEs come by dependency but are not
# wanted; their files are left out. So are documentation, translations and
# what apt leaves. hack/runner-root.sh and hack/gitops-root.sh call it and
# cache what it makes (hack/root-cache.sh).
#
# The mirror is the one the machine's apt uses (VMOP_DEBIAN_MIRROR
# overrides it); the suites are trixie, trixie-updates and trixie-security.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$1
shift
packages=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do packages+=("$1"); shift; done
[ $# -gt 0 ] && shift
drop_packages=("$@")

drop_paths=(
	# Documentation, translations, and data only shown to people.
	usr/share/doc usr/share/man usr/share/info usr/share/locale usr/share/lintian usr/share/bug
	# What apt left, and the host's files mmdebstrap copies in.
	etc/apt var/lib/apt var/cache var/log etc/resolv.conf etc/hostname)

mirror=${VMOP_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
	[ -n "$mirror" ] || mirror=$(sed -n 's/^deb[[:space:]]\+\(http[^[:space:]]*\/debian\)\/*[[:space:]].*/\1/p' /etc/apt/sources.list 2>/dev/null | head -1)
	[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
fi

command -v mmdebstrap >/dev/null || { echo "mmdebstrap not found: run hack/install-deps.sh" >&2; exit 1; }
mkdir -p "$(dirname "$dir")"
echo "extracting ${packages[*]} from trixie at $mirror into $dir" >&2
# A fixed time: the root changes only when its packages do, so its layer
# is shared between vmop versions.
SOURCE_DATE_EPOCH=1767225600 mmdebstrap --quiet --variant=extract \
	--include="$(IFS=,; echo "${packages[*]}")" \
	--extract-hook="$here/debian-root-hook.sh \"\$1\" ${drop_packages[*]}" \
	trixie "$dir" \
	"deb $mirror trixie main" "deb $mirror trixie-updates main" "deb ${mirror%/debian}/debian-security trixie-security main" >&2
for p in "${drop_paths[@]}"; do rm -rf "${dir:?}/$p"; done
