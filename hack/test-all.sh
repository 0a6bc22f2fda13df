#!/usr/bin/env bash
# make test's tests, once make has installed what they need: test/node
# (the real node, by far the longest package) starts first and runs
# beside vet, lint, verify and every other package, which go one at a time so
# that no more than two test programs share the machine's cores (as
# go test -p 2 did). The harness's own node tests (testnode, csidriver)
# follow test/node in the background: they all take the machine's node
# lock. The run takes about as
# long as test/node; its output comes after the others'.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
MAKE=${MAKE:-make}
VMOP_KUBE_BIN_DIR=$(hack/build-control-plane.sh all)
export VMOP_KUBE_BIN_DIR
# As the Makefile's GOTEST: no cgo (as vmop is shipped; Go links the test
# programs itself) and no DWARF.
export CGO_ENABLED=0

node_log=$(mktemp)
trap 'rm -f "$node_log"' EXIT
echo "test/node runs in the background (~45 minutes); its result follows the other packages'"
node_pkgs="./test/node ./test/harness/testnode ./test/harness/csidriver"
# shellcheck disable=SC2086 # several packages
$GO test -p 1 -count=1 -ldflags=-w -timeout 70m $node_pkgs >"$node_log" 2>&1 &
node=$!

status=0
if "$MAKE" --no-print-directory vet lint verify; then
	# shellcheck disable=SC2046 # one argument per package
	$GO test -p 1 -count=1 -ldflags=-w -timeout 50m $($GO list ./... | grep -v -e '/test/node$' -e '/test/harness/testnode$' -e '/test/harness/csidriver$') || status=$?
else
	status=1
	# SIGINT, not SIGTERM: the node's harness then undoes its changes
	# to this host (loop devices, mounts, iptables).
	echo "vet, lint or verify failed: stopping test/node"
	pkill -INT -P "$node" || true
fi
node_status=0
wait "$node" || node_status=$?
cat "$node_log"
[ "$status" -eq 0 ] && [ "$node_status" -eq 0 ]
