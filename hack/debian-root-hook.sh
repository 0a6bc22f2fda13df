#!/usr/bin/env bash
# mmdebstrap's extract hook for the image roots of hack/runner-root.sh and
# hack/gitops-root.sh: ROOT PACKAGE... (the packages to leave out). It runs
# while the downloaded .deb files are still in ROOT's apt cache, and does
# what maintainer scripts would have done and every image needs; what one
# image alone needs its script makes.
set -euo pipefail
root=$1
shift
declare -A drop
for p in "$@"; do drop[$p]=1; done

status=$root/var/lib/dpkg/status.d
mkdir -p "$status"
for deb in "$root"/var/cache/apt/archives/*.deb; do
	pkg=$(dpkg-deb -f "$deb" Package)
	if [ -n "${drop[$pkg]:-}" ]; then
		# Files only; directories may be shared with kept packages.
		dpkg-deb --fsys-tarfile "$deb" | tar -t | grep -v '/$' | while read -r f; do
			rm -f "$root/${f#./}"
		done
		continue
	fi
	# One control file per package, as distroless images keep them, so that
	# scanners (trivy, grype, syft) see every package and its version.
	dpkg-deb -f "$deb" > "$status/$pkg"
done

# Accounts, as base-passwd's maintainer script would make them.
cp "$root/usr/share/base-passwd/passwd.master" "$root/etc/passwd"
cp "$root/usr/share/base-passwd/group.master" "$root/etc/group"
# The CA bundle that update-ca-certificates would write (libcurl reads it
# for https URLs: the runner's CD images, git's remotes).
mkdir -p "$root/etc/ssl/certs"
find "$root/usr/share/ca-certificates/mozilla" -name '*.crt' | LC_ALL=C sort | xargs cat > "$root/etc/ssl/certs/ca-certificates.crt"
