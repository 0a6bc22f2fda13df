// Command netcheck is the program of the test node's Service tests, whose
// images can neither listen nor dial (pause), or need qemu's root and
// config (vm-runner): "netcheck serve PORT" answers every TCP connection
// on PORT with its host name (a pod's name) and closes it; "netcheck dial
// HOST:PORT [LINE]" sends LINE and a newline when given, ends its sending
// side (so that an echo service ends too), prints what the server answers
// and fails when it cannot.
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
	var err error
	switch {
	case len(os.Args) == 3 && os.Args[1] == "serve":
		err = serve(os.Args[2])
	case len(os.Args) == 3 && os.Args[1] == "dial":
		err = dial(os.Args[2], nil)
	case len(os.Args) == 4 && os.Args[1] == "dial":
		err = dial(os.Args[2], []byte(os.Args[3]+"\n"))
	default:
		fmt.Fprintln(os.Stderr, "usage: netcheck serve PORT | netcheck dial HOST:PORT [LINE]")
		os.Exit(2)
	}
	if err != nil {
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
func dial(addr string, line []byte) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	if line != nil {
		if _, err := c.Write(line); err != nil {
			return err
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			return err
		}
	}
	_, err = io.Copy(os.Stdout, c)
	return err
}
