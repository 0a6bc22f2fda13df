# Sourced by the scripts that build tools the tests run from the module
# proxy (build-gitops.sh, build-csi.sh), for their one way to cache.
#
# tools_cache NAME FILE...: the cache directory of NAME keyed by the FILEs
# (the script, its tools modules, this file) is $cache; a complete one is
# printed and the script exits. Else it holds NAME's lock (test binaries
# of several packages may ask at once: one builds), sets the environment
# of a static, reproducible build with go.sum as committed (the modules
# were tidied with GOSUMDB=off: the proxy is all there is), and gives an
# empty $tmp to fill and then move to $cache.
tools_cache() {
	local name=$1 key base
	shift
	key=$(cat "$@" | sha256sum | cut -c1-16)
	base=${VMOP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmop}
	cache=$base/$name-$key
	mkdir -p "$base"
	exec 9>"$base/.$name.lock"
	flock 9
	if [ -d "$cache" ]; then
		echo "$cache"
		exit 0
	fi
	export CGO_ENABLED=0 GOOS=linux GOARCH=amd64 GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off
	tmp=$cache.tmp
	rm -rf "$tmp"
	mkdir -p "$tmp"
}
