// Package freeport finds loopback TCP ports that are free now, for the
// servers that tests start on 127.0.0.1. Another process may take a port
// between the check and its use; the server's listen error then says so.
package freeport

import (
	"net"
	"testing"
)

// Ports finds n loopback ports that are free now; all are held open
// together so that they differ.
func Ports(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Get returns one free loopback port, or fails t.
func Get(t testing.TB) int {
	t.Helper()
	ports, err := Ports(1)
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	return ports[0]
}
