# Sourced by hack/runner-root.sh and hack/gitops-root.sh: with their DIR
# argument empty, root_cache NAME FILE sets out to NAME's directory in the
# cache (~/.cache/vmop/images, keyed by the calling script and
# debian-root.sh with its hook) and, when FILE is already there (a root
# built before), prints it and exits. The cache's lock is held until the
# calling script ends, so that two builds of one root do not race.
root_cache() {
	local name=$1 marker=$2 key cache
	key=$(cat "$0" "$here/debian-root.sh" "$here/debian-root-hook.sh" | sha256sum | cut -c1-16)
	cache=${VMOP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmop}/images
	out=$cache/$name-$key
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
	if [ -e "$out/$marker" ]; then
		echo "$out"
		exit 0
	fi
}
