package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortsDifferAndListen: the ports are distinct and a server can listen
// on each.
func TestPortsDifferAndListen(t *testing.T) {
	ports, err := Ports(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
	}
	if p := Get(t); p <= 0 || p > 65535 {
		t.Fatalf("Get: port %d", p)
	}
}
