#!/usr/bin/env bash
# Builds the root file system that the node tests' Argo CD and Redis images
# share (test/harness/gitops puts the binaries on it) from Debian 13
# (trixie) packages, extracted by hack/debian-root.sh, into DIR, and prints
# DIR. Without DIR it builds into a cache (~/.cache/vmop/images, keyed by
# the scripts) once per machine: ~1 minute.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

# What Argo CD's pods run besides argocd: coreutils for the init
# containers' /bin/cp, git for the repo server, dash for what git runs
# through /bin/sh (git submodule, hooks), gpg and gpg-agent because the
# repo server makes a GnuPG keyring at start unless ARGOCD_GPG_ENABLED is
# false (upstream's image has them too), redis-server for argocd-redis,
# CA certificates for https remotes, base-files for the /bin, /lib, /lib64
# links and /etc/os-release.
packages=(base-files coreutils dash git gpg gpg-agent ca-certificates redis-server)
# What comes by dependency but nothing here runs: perl (~60 MB; only
# git's perl commands, svn and send-email among them, need it), git's
# manual pages, and the tools that maintainer scripts would run.
drop_packages=(perl perl-base perl-modules-5.40 libperl5.40 liberror-perl libgdbm-compat4t64 libgdbm6t64 libdb5.3t64
	git-man adduser passwd debconf login.defs openssl mawk)

out=${1:-}
if [ -z "$out" ]; then
	. "$here/root-cache.sh"
	root_cache gitops-root usr/bin/redis-server
fi

tmp=$out.tmp
rm -rf "$tmp" "$out"
echo "building the gitops root into $out" >&2
"$here/debian-root.sh" "$tmp" "${packages[@]}" -- "${drop_packages[@]}"
# Argo CD's user, as its upstream image has it: uid and gid 999, home
# /home/argocd.
echo "argocd:*:999:999:Argo CD:/home/argocd:/usr/sbin/nologin" >> "$tmp/etc/passwd"
echo "argocd:*:999:" >> "$tmp/etc/group"
mkdir -p "$tmp/home/argocd"
chown 999:999 "$tmp/home/argocd"
mv "$tmp" "$out"
echo "$out"
