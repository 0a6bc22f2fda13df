// Command netcheck is the program of the test node's Service tests, whose
// images can neither listen nor dial (pause), or need qemu's root and
// config (vm-runner): "netcheck serve PORT" answers every TCP connection
// on PORT with its host name (a pod's name) and closes it; "netcheck dial
// HOST:PORT" prints what such a server answers and fails when it cannot.
// The test node's tests build its image locally, as no registry is
// reachable.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 3 || (os.Args[1] != "serve" && os.Args[1] != "dial") {
		fmt.Fprintln(os.Stderr, "usage: netcheck serve PORT | netcheck dial HOST:PORT")
		os.Exit(2)
	}
	run := serve
	if os.Args[1] == "dial" {
		run = dial
	}
	if err := run(os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "netcheck:", err)
		os.Exit(1)
	}
}

func serve(port string) error {
	name, err := os.Hostname()
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", ":"+port)
	if err != nil {
		return err
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		fmt.Fprintln(c, name)
		c.Close()
	}
}

// dial's time limit keeps a test's failure short: a dropped packet is
// otherwise retried for minutes.
func dial(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	_, err = io.Copy(os.Stdout, c)
	return err
}
