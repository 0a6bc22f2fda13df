package runner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
)

// Connect copies in to TCP port port of the guest of the VM configured in
// configFile, and what comes back to out (vm-runner connect). It asks the
// running runner where that port is reached (see serveConnect), which
// keeps that way open until Connect returns. It returns when the guest
// closes the connection; the end of in only closes the guest's side for
// reading, as a half-closed TCP connection does.
func Connect(ctx context.Context, configFile string, port int, in io.Reader, out io.Writer) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %d: must be a number from 1 to 65535", port)
	}
	resp, sock, err := askRunner(ctx, configFile, http.MethodPost, "/connect?port="+strconv.Itoa(port), nil)
	if err != nil {
		return err
	}
	// Closing the body ends the request, and with it the runner's forward.
	defer resp.Body.Close()
	answer := bufio.NewReader(io.LimitReader(resp.Body, 512))
	line, err := answer.ReadString('\n')
	if resp.StatusCode != http.StatusOK {
		return errors.New(strings.TrimSpace(line))
	}
	if err != nil {
		return fmt.Errorf("the runner's answer on %s: %w", sock, err)
	}
	addr := strings.TrimSpace(line)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("guest port %d: %w", port, err)
	}
	return pipe(conn.(*net.TCPConn), port, in, out)
}

// pipe copies in to conn and conn to out until conn's peer closes it.
func pipe(conn *net.TCPConn, port int, in io.Reader, out io.Writer) error {
	defer conn.Close()
	inDone := make(chan struct{})
	go func() {
		_, _ = io.Copy(conn, in)
		_ = conn.CloseWrite()
		close(inDone)
	}()
	n, err := io.Copy(out, conn)
	if n > 0 {
		return err
	}
	// qemu's user network accepts the connection before the guest does,
	// and closes it when the guest refuses: the refusal shows as an end
	// without a byte while the client still had its side open, or as a
	// reset of what the client had sent. A service that closes at once
	// looks the same.
	select {
	case <-inDone:
		if !errors.Is(err, syscall.ECONNRESET) {
			return err
		}
	default:
	}
	return fmt.Errorf("guest port %d: the connection was closed before the guest sent anything: does a service listen on port %d in the guest?", port, port)
}
