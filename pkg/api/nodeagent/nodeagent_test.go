package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/podnet"
)

// agent connects to socket once it exists, as vm-node does, and answers
// with handle.
func agent(t *testing.T, socket string, handle func(Request) Response) <-chan error {
	done := make(chan error, 1)
	go func() {
		for range 500 {
			c, err := net.Dial("unix", socket)
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			defer c.Close()
			done <- Answer(c, handle)
			return
		}
		done <- os.ErrNotExist
	}()
	return done
}

func TestAskAnswered(t *testing.T) {
	socket := filepath.Join(t.TempDir(), Socket)
	want := &podnet.Network{Uplink: "eth0", PodIP: netip.MustParseAddr("10.1.2.3"), MTU: 1450,
		Gateway: netip.MustParseAddr("10.0.2.2"), Guest: netip.MustParsePrefix("10.0.2.15/24")}
	var got Request
	done := agent(t, socket, func(r Request) Response {
		got = r
		return Response{PodNetwork: want}
	})
	req := Request{PodNetwork: &podnet.Options{Net: netip.MustParsePrefix("10.0.2.0/24"), Ports: []podnet.Port{{Protocol: "TCP", Port: 22}}}}
	resp, err := Ask(t.Context(), socket, req)
	require.NoError(t, err)
	require.NoError(t, <-done)
	require.Equal(t, want, resp.PodNetwork)
	require.Equal(t, req, got)
	require.NoFileExists(t, socket, "a socket that was answered is gone")
}

func TestAskRefused(t *testing.T) {
	socket := filepath.Join(t.TempDir(), Socket)
	done := agent(t, socket, func(Request) Response { return Response{Error: "refused: not a runner"} })
	_, err := Ask(t.Context(), socket, Request{})
	require.EqualError(t, err, "the node agent: refused: not a runner")
	require.NoError(t, <-done)
}

func TestAskNoAgent(t *testing.T) {
	t.Setenv(EnvSocket, filepath.Join(t.TempDir(), Socket))
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(errNoAgent)
	_, err := AskIfServed(ctx, Request{})
	require.ErrorIs(t, err, errNoAgent)
	require.ErrorContains(t, err, "kubectl -n vmop-system get pods")
}

func TestAskIfServedUnserved(t *testing.T) {
	t.Setenv(EnvSocket, "")
	resp, err := AskIfServed(t.Context(), Request{})
	require.NoError(t, err)
	require.Nil(t, resp)
}

func TestAnswerBadRequest(t *testing.T) {
	a, b := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- Answer(b, func(Request) Response { return Response{} }) }()
	_, err := a.Write([]byte(`{"bogus": 1}` + "\n"))
	require.NoError(t, err)
	buf := make([]byte, 200)
	n, _ := a.Read(buf)
	require.Contains(t, string(buf[:n]), `unknown field \"bogus\"`)
	require.Error(t, <-done)
}

func TestWaitPrepared(t *testing.T) {
	socket := filepath.Join(t.TempDir(), Socket)
	t.Setenv(EnvSocket, socket)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, WaitPrepared(ctx), context.DeadlineExceeded, "before the agent answered")

	done := agent(t, socket, func(Request) Response { return Response{} })
	_, err := AskIfServed(t.Context(), Request{})
	require.NoError(t, err)
	require.NoError(t, <-done)
	require.NoError(t, WaitPrepared(t.Context()))

	t.Setenv(EnvSocket, "")
	require.NoError(t, WaitPrepared(t.Context()), "a container the agent does not serve waits for nothing")
}

// countingReader counts what is read from it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// endless is a request that never ends: ports without end.
type endless struct{ off int }

func (e *endless) Read(p []byte) (int, error) {
	const head, port = `{"podNetwork":{"net":"10.0.2.0/24","ports":[`, `{"protocol":"TCP","port":1},`
	n := 0
	for n < len(p) {
		s := head[min(e.off, len(head)):]
		if s == "" {
			s = port[(e.off-len(head))%len(port):]
		}
		c := copy(p[n:], s)
		n += c
		e.off += c
	}
	return n, nil
}

// TestAnswerBoundsRequest sends a request without end (as a hostile pod
// would, 100 MiB and more): the agent reads no more than MaxRequest and
// answers why, without handling it.
func TestAnswerBoundsRequest(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	done := make(chan error, 1)
	go func() {
		done <- Answer(b, func(Request) Response {
			t.Error("a request larger than MaxRequest was handled")
			return Response{}
		})
		b.Close()
	}()
	sent := &countingReader{r: io.LimitReader(&endless{}, 100<<20)}
	go func() { _, _ = io.Copy(a, sent) }()
	answer := make(chan Response, 1)
	go func() {
		var resp Response
		_ = json.NewDecoder(a).Decode(&resp)
		answer <- resp
	}()
	err := <-done
	require.Equal(t, "reading the request: the request is larger than 64 KiB", (<-answer).Error)
	require.ErrorContains(t, err, "the request is larger than 64 KiB")
	require.LessOrEqual(t, sent.n, int64(MaxRequest+64<<10), "bytes the agent took")
}

// TestAnswerBoundsCounts: a request within MaxRequest with more ports
// than MaxPorts is refused before it is handled.
func TestAnswerBoundsCounts(t *testing.T) {
	for _, field := range []string{"ports", "reserved"} {
		a, b := net.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- Answer(b, func(Request) Response {
				t.Error("a request with too many ports was handled")
				return Response{}
			})
		}()
		req := `{"podNetwork":{"net":"10.0.2.0/24","` + field + `":[` + strings.Repeat(`{"protocol":"TCP","port":1},`, MaxPorts) + `{"protocol":"TCP","port":1}]}}` + "\n"
		require.Less(t, len(req), MaxRequest)
		go func() { _, _ = a.Write([]byte(req)) }()
		var resp Response
		require.NoError(t, json.NewDecoder(a).Decode(&resp))
		require.Equal(t, fmt.Sprintf("podNetwork.%s: %d ports, more than %d", field, MaxPorts+1, MaxPorts), resp.Error)
		require.Error(t, <-done)
		a.Close()
		b.Close()
	}
}

// TestReply answers without reading the request.
func TestReply(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		_ = Reply(b, Response{Error: "refused: not a runner"})
		b.Close()
	}()
	var resp Response
	require.NoError(t, json.NewDecoder(a).Decode(&resp))
	require.Equal(t, "refused: not a runner", resp.Error)
}
