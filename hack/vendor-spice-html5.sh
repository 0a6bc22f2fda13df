#!/usr/bin/env bash
# Copies the SPICE HTML5 client from the npm registry into
# third_party/spice-html5 for kubectl vm console --browser to embed, and
# applies vmop's fixes (third_party/spice-html5/patches, each says why). Its files stay apart from vmop's: it is LGPL-3.0-or-later, and its
# licence goes with it. Left out: the ES module loader for browsers without
# modules, the sample pages and the packaging files.
set -euo pipefail
version=0.2.1
integrity=sha512-NY86i+x/0ldKK89enXghsXCzWwfb5DQ91hQFu9hbyLcAfCVn+ZKoYsw7xUWX6/HQBRrdu/4F1id7SdOwNqpG9g==
here=$(cd "$(dirname "$0")/.." && pwd)
dest=$here/third_party/spice-html5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@spice-project/spice-html5@$version" >/dev/null)
tgz=$tmp/spice-project-spice-html5-$version.tgz
got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
if [ "$got" != "$integrity" ]; then
	echo "spice-html5 $version: integrity $got, want $integrity" >&2
	exit 1
fi
tar -xzf "$tgz" -C "$tmp"
find "$dest" -mindepth 1 -maxdepth 1 ! -name embed.go ! -name '*_test.go' ! -name patches -exec rm -rf {} + 2>/dev/null || true
mkdir -p "$dest"
cd "$tmp/package"
cp --parents COPYING COPYING.LESSER README package.json "$dest/"
find src -name '*.js' ! -path '*/browser-es-module-loader/*' -exec cp --parents {} "$dest/" \;
for p in "$dest"/patches/*.patch; do
	patch -s -p1 -d "$dest" <"$p"
done
