#!/usr/bin/env bash
# Builds golangci-lint from the module proxy into a cache keyed by version
# (only the first run on a machine pays the build, ~3 minutes on 2 cores),
# then runs it with the given arguments (none: prints the binary's path).
set -euo pipefail

version=v2.15.0
cache=${VMOP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmop}/golangci-lint-$version
bin=$cache/golangci-lint

if [ ! -x "$bin" ]; then
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
	if [ ! -x "$bin" ]; then
		echo "building golangci-lint $version into $cache (first run only)" >&2
		# Outside any module, so that no go.mod or go.sum is touched.
		(cd "$cache" && GOBIN=$cache/tmp GOFLAGS= go install \
			"github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version")
		mv "$cache/tmp/golangci-lint" "$bin"
		rmdir "$cache/tmp"
	fi
fi
if [ $# -eq 0 ]; then
	echo "$bin"
	exit 0
fi
exec "$bin" "$@"
