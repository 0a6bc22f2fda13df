// Command impostor looks like a VM pod's runner to vmop's node agent: it
// offers the agent's socket and asks for a pod network, as vm-runner
// does, from a pod that carries vmop's labels and volume but runs this
// image. It prints the agent's answer and the pod's interfaces, then
// waits to be deleted.
//
// With -size it sends a request of that many bytes instead (a hostile
// one), and with -exit it does nothing and ends (an init container).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/pkg/podnet"
)

func main() {
	size := flag.Int64("size", 0, "send a request of this many bytes")
	exit := flag.Bool("exit", false, "ask nothing, end at once")
	flag.Parse()
	if *exit {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	socket := filepath.Join(nodeagent.Dir, nodeagent.Socket)
	var err error
	if *size > 0 {
		err = hostile(socket, *size)
	} else {
		_, err = nodeagent.Ask(ctx, socket, nodeagent.Request{
			PodNetwork: &podnet.Options{Net: netip.MustParsePrefix("10.0.2.0/24")},
		})
	}
	fmt.Printf("answer: %v\n", err)
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		fmt.Printf("link: %s\n", l.Name())
	}
	<-ctx.Done()
}

// hostile offers socket, as nodeagent.Ask does, and sends the agent a
// request of size bytes: one long string, which a JSON decoder holds
// whole.
func hostile(socket string, size int64) error {
	tmp := filepath.Join(filepath.Dir(socket), ".hostile")
	l, err := net.Listen("unix", tmp)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := os.Rename(tmp, socket); err != nil {
		return err
	}
	c, err := l.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	const head, tail = `{"podNetwork":{"net":"`, `"}}`
	go func() {
		chunk := []byte(strings.Repeat("a", 1<<20))
		_, _ = io.WriteString(c, head)
		for left := size - int64(len(head)+len(tail)); left > 0; left -= int64(len(chunk)) {
			if _, err := c.Write(chunk[:min(int64(len(chunk)), left)]); err != nil {
				return
			}
		}
		_, _ = io.WriteString(c, tail)
	}()
	var resp nodeagent.Response
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return fmt.Errorf("the node agent's answer: %w", err)
	}
	return fmt.Errorf("the node agent: %s", resp.Error)
}
