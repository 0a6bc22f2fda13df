package nodeagent

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
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
