// Package testcluster runs a real etcd and kube-apiserver for tests, on
// loopback ports with throwaway data, certificates and credentials. Further
// parts (a controller manager, a node simulator) join through StartProcess,
// so that Stop ends them with the rest.
package testcluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options tune Start. The zero value works.
type Options struct {
	// BinDir holds kube-apiserver; empty means KubeBinDir.
	BinDir string
	// Etcd is the etcd binary; empty means "etcd" in PATH, else /usr/bin/etcd.
	Etcd string
	// Dir receives data, certificates and logs; empty means a new temporary
	// directory that Stop removes.
	Dir string
	// ReadyTimeout bounds the wait for etcd and the API server (default 60s).
	ReadyTimeout time.Duration
	// APIServerArgs are added to kube-apiserver's command line.
	APIServerArgs []string
}

// Cluster is a running etcd and kube-apiserver.
type Cluster struct {
	// Dir holds data, certificates, logs and the kubeconfig.
	Dir string
	// BinDir is where the control-plane binaries were found.
	BinDir string
	// Config reaches the API server as a member of system:masters.
	Config *rest.Config
	// Kubeconfig is a file for kubectl with the same credentials.
	Kubeconfig string
	// Etcd and APIServer are the running processes.
	Etcd, APIServer *Process
	// EtcdURL is etcd's client URL.
	EtcdURL string

	removeDir bool
	mu        sync.Mutex
	procs     []*Process
	stopped   bool
}

// New starts a cluster with default options for a test, fails the test if
// that does not work, and stops the cluster when the test ends.
func New(t testing.TB) *Cluster {
	t.Helper()
	return NewWithOptions(t, Options{})
}

// NewWithOptions is New with options.
func NewWithOptions(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("test cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.Processes() {
				t.Logf("%s log (%s), last lines:\n%s", p.Name, p.Log, p.LogTail(30))
			}
		}
		c.Stop()
	})
	return c
}

// Start runs etcd and kube-apiserver and waits until the API server is
// ready. ctx bounds the start only, not the life of the processes.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 60 * time.Second
	}
	c = &Cluster{Dir: opts.Dir, BinDir: opts.BinDir}
	if c.BinDir == "" {
		if c.BinDir, err = KubeBinDir(ctx); err != nil {
			return nil, err
		}
	}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "vmop-testcluster-"); err != nil {
			return nil, err
		}
		c.removeDir = true
	}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	etcd := opts.Etcd
	if etcd == "" {
		if etcd, err = exec.LookPath("etcd"); err != nil {
			etcd = "/usr/bin/etcd"
		}
	}
	if err = c.startEtcd(ctx, etcd, opts.ReadyTimeout); err != nil {
		return c, err
	}
	if err = c.startAPIServer(ctx, opts); err != nil {
		return c, err
	}
	return c, nil
}

func (c *Cluster) startEtcd(ctx context.Context, bin string, timeout time.Duration) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	c.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	p, err := c.StartProcess("etcd", bin,
		"--name=test",
		"--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+c.EtcdURL,
		"--advertise-client-urls="+c.EtcdURL,
		"--listen-peer-urls="+peer,
		"--initial-advertise-peer-urls="+peer,
		"--initial-cluster=test="+peer,
		"--logger=zap",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	c.Etcd = p
	return waitHTTP(ctx, p, timeout, http.DefaultClient, c.EtcdURL+"/health", "")
}

func (c *Cluster) startAPIServer(ctx context.Context, opts Options) error {
	certDir := filepath.Join(c.Dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	token, err := randomToken()
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(c.Dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(token+",admin,admin,system:masters\n"), 0o600); err != nil {
		return err
	}
	saKey := filepath.Join(c.Dir, "service-account.key")
	if err := writeRSAKey(saKey); err != nil {
		return err
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	host := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	args := []string{
		"--etcd-servers=" + c.EtcdURL,
		"--bind-address=127.0.0.1",
		// Loopback only; the endpoint reconciler refuses loopback addresses
		// and nothing in tests needs the kubernetes Service's endpoints.
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + certDir,
		"--token-auth-file=" + tokenFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saKey,
		"--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		// Runner pods need /dev/kvm.
		"--allow-privileged=true",
	}
	p, err := c.StartProcess("kube-apiserver", filepath.Join(c.BinDir, "kube-apiserver"), append(args, opts.APIServerArgs...)...)
	if err != nil {
		return err
	}
	c.APIServer = p

	// The serving certificate appears only once the server runs.
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if err := waitHTTP(ctx, p, opts.ReadyTimeout, insecure, host+"/readyz", token); err != nil {
		return err
	}
	caData, err := os.ReadFile(filepath.Join(certDir, "apiserver.crt"))
	if err != nil {
		return err
	}
	c.Config = &rest.Config{
		Host:            host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: caData},
		QPS:             100,
		Burst:           200,
	}
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: caData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*kc, c.Kubeconfig); err != nil {
		return err
	}
	// Many tests use the default namespace; it is created just after ready.
	return waitHTTP(ctx, p, opts.ReadyTimeout, insecure, host+"/api/v1/namespaces/default", token)
}

// StartProcess starts a further process of the cluster (a controller, a
// node simulator), logging into the cluster's directory; Stop ends it.
func (c *Cluster) StartProcess(name, path string, args ...string) (*Process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, errors.New("cluster is stopped")
	}
	p, err := StartProcess(c.Dir, name, path, args...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// Processes returns the cluster's processes in start order.
func (c *Cluster) Processes() []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Process(nil), c.procs...)
}

// Stop kills the processes, latest first, waits for them and removes the
// directory if Start created it. It may be called more than once.
func (c *Cluster) Stop() {
	c.mu.Lock()
	procs := c.procs
	first := !c.stopped
	c.stopped = true
	c.mu.Unlock()
	if !first {
		return
	}
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop()
	}
	if c.removeDir {
		_ = os.RemoveAll(c.Dir)
	}
}

// Kubectl returns a command that runs the real kubectl against the cluster.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) *exec.Cmd {
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		bin = "/usr/bin/kubectl"
	}
	return exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
}

// waitHTTP polls url until it answers 200, the process exits or the time is
// up; errors carry the end of the process's log.
func waitHTTP(ctx context.Context, p *Process, timeout time.Duration, client *http.Client, url, token string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "no answer"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if resp, err := client.Do(req); err != nil {
			last = err.Error()
		} else {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		}
		select {
		case <-p.Done():
			return fmt.Errorf("%s exited (%v) before %s was ready; log %s:\n%s", p.Name, p.Err(), url, p.Log, p.LogTail(30))
		case <-ctx.Done():
			return fmt.Errorf("%s: %s not ready after %v (%s); log %s:\n%s", p.Name, url, timeout, last, p.Log, p.LogTail(30))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts finds n loopback ports that are free now; all are held open
// together so that they differ.
func freePorts(n int) ([]int, error) {
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

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	return os.WriteFile(path, b, 0o600)
}
