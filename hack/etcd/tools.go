//go:build tools

// Package tools pins the etcd that hack/build-control-plane.sh builds for
// the tests' control planes. Not Debian's 3.4.23: kube-apiserver serves
// consistent lists from its watch cache only with etcd 3.4.31 or 3.5.13
// and later, and reads every object from etcd otherwise, as no cluster of
// today does. The blank import keeps etcd in go.mod.
package tools

import _ "go.etcd.io/etcd/server/v3"
