// Package testcluster runs a real etcd and kube-apiserver for tests, on
// loopback ports with throwaway data, certificates and credentials; on
// request also kube-controller-manager and kwok simulating nodes, so that
// workloads get pods that become Running. Every part runs through
// StartProcess, so that Stop ends it with the rest.
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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/vmop/vmop/pkg/kubeapi"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/freeport"
	"github.com/vmop/vmop/test/harness/prereq"
)

// Options tune Start. The zero value works.
type Options struct {
	// BinDir holds etcd and kube-apiserver, and kube-controller-manager,
	// kwok and kwok-stages/ when they are asked for; empty means
	// KubeBinDir.
	BinDir string
	// Dir receives data, certificates and logs; empty means a new temporary
	// directory that Stop removes.
	Dir string
	// ReadyTimeout bounds the wait for etcd and the API server (default 60s).
	ReadyTimeout time.Duration
	// APIServerArgs are added to kube-apiserver's command line.
	APIServerArgs []string
	// CRDs are CustomResourceDefinition manifests installed (as by
	// InstallCRD) before the controllers start: the garbage collector looks
	// for new resources only every 30 s, and until it has found one does
	// not collect what its objects own (seen: 41 s).
	CRDs [][]byte
	// Controllers starts kube-controller-manager with the controllers that
	// StatefulSets and garbage collection need (see controllers.go).
	Controllers bool
	// MoreControllers are further kube-controller-manager controllers, for
	// a cluster with real nodes (see test/harness/testnode).
	MoreControllers []string
	// Nodes are created as Node objects that kwok makes Ready and whose pods
	// it makes Running. There is no scheduler: pods need spec.nodeName.
	Nodes []string
	// Address is where the API server listens and what it advertises;
	// empty means 127.0.0.1. Pods on a real node need an address that is
	// not loopback (test/harness/testnode uses its bridge's).
	Address string
}

// Cluster is a running etcd and kube-apiserver.
type Cluster struct {
	// Dir holds data, certificates, logs and the kubeconfig.
	Dir string
	// BinDir is where the control-plane binaries were found.
	BinDir string
	// Config reaches the API server as a member of system:masters.
	Config *rest.Config
	// APIConfig is Config for vmop's own client (pkg/kubeapi).
	APIConfig *kubeapi.Config
	// Kubeconfig is a file for kubectl with the same credentials.
	Kubeconfig string
	// Etcd and APIServer are the running processes; ControllerManager and
	// Kwok also when Options ask for them.
	Etcd, APIServer, ControllerManager, Kwok *Process
	// EtcdURL is etcd's client URL.
	EtcdURL string
	// Address and Port are where the API server listens.
	Address string
	Port    int

	client    kubernetes.Interface
	caFile    string // the API server's certificate bundle
	saKey     string // the service-account signing key
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
	prereq.ControlPlane(t, opts.binaries()...)
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

// binaries are the control-plane binaries that opts need.
func (opts Options) binaries() []string {
	bins := []string{"etcd", "kube-apiserver"}
	if opts.Controllers {
		bins = append(bins, "kube-controller-manager")
	}
	if len(opts.Nodes) > 0 {
		bins = append(bins, "kwok")
	}
	return bins
}

// Start runs etcd, kube-apiserver and what opts ask for, and waits until all
// are ready. ctx bounds the start only, not the life of the processes.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 60 * time.Second
	}
	c = &Cluster{Dir: opts.Dir, BinDir: opts.BinDir}
	if c.BinDir == "" {
		if c.BinDir, err = KubeBinDir(ctx, opts.binaries()...); err != nil {
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
	if err = c.startEtcd(ctx, filepath.Join(c.BinDir, "etcd"), opts.ReadyTimeout); err != nil {
		return c, err
	}
	if err = c.startAPIServer(ctx, opts); err != nil {
		return c, err
	}
	// Pods in "default" are refused until its ServiceAccount exists.
	if err = c.ensureDefaultServiceAccount(ctx, metav1.NamespaceDefault); err != nil {
		return c, err
	}
	for _, crd := range opts.CRDs {
		if err = c.InstallCRD(ctx, crd); err != nil {
			return c, err
		}
	}
	if opts.Controllers {
		if err = c.startControllerManager(ctx, opts.ReadyTimeout, opts.MoreControllers); err != nil {
			return c, err
		}
	}
	if len(opts.Nodes) > 0 {
		if err = c.startKwok(ctx, opts.Nodes, opts.ReadyTimeout); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c *Cluster) startEtcd(ctx context.Context, bin string, timeout time.Duration) error {
	ports, err := freeport.Ports(2)
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
	c.saKey = filepath.Join(c.Dir, "service-account.key")
	if err := writeRSAKey(c.saKey); err != nil {
		return err
	}
	ports, err := freeport.Ports(1)
	if err != nil {
		return err
	}
	addr := opts.Address
	if addr == "" {
		addr = "127.0.0.1"
	}
	c.Address = addr
	c.Port = ports[0]
	host := "https://" + net.JoinHostPort(addr, strconv.Itoa(ports[0]))
	args := []string{
		"--etcd-servers=" + c.EtcdURL,
		"--bind-address=" + addr,
		"--advertise-address=" + addr,
		"--endpoint-reconciler-type=" + endpointReconciler(addr),
		// logs, exec and port-forward dial the kubelet at its node's IP,
		// as the node's name does not resolve.
		"--kubelet-preferred-address-types=InternalIP",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + certDir,
		"--token-auth-file=" + tokenFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.saKey,
		"--service-account-signing-key-file=" + c.saKey,
		"--service-cluster-ip-range=" + ServiceCIDR,
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
	if err := waitHTTP(ctx, p, opts.ReadyTimeout, insecureHTTP, host+"/readyz", token); err != nil {
		return err
	}
	c.caFile = filepath.Join(certDir, "apiserver.crt")
	caData, err := os.ReadFile(c.caFile)
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
	c.APIConfig = &kubeapi.Config{Server: host, Token: token, CAData: caData}
	if c.client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
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
	return waitHTTP(ctx, p, opts.ReadyTimeout, insecureHTTP, host+"/api/v1/namespaces/default", token)
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

// Client reaches the API server as a member of system:masters.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

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

// endpointReconciler is how the API server publishes itself as the
// kubernetes Service's endpoint: the default (lease) for an address pods
// can reach, which a node's kube-proxy then serves (test/harness/testnode);
// none for loopback, which the reconciler refuses and no pod could reach.
func endpointReconciler(addr string) string {
	if net.ParseIP(addr).IsLoopback() {
		return "none"
	}
	return "lease"
}

// ServiceCIDR is the cluster's Service IP range; 10.0.0.1 is the
// kubernetes Service.
const ServiceCIDR = "10.0.0.0/24"

// insecureHTTP reaches servers whose self-signed certificate is not known
// up front (it appears only once the server runs).
var insecureHTTP = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

// waitHTTP polls url until it answers 200, the process exits or the time is
// up; errors carry the end of the process's log.
func waitHTTP(ctx context.Context, p *Process, timeout time.Duration, client *http.Client, url, token string) error {
	return WaitUntil(ctx, p, timeout, url, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
}

// WaitUntil calls ready until it returns nil, the process exits or the time
// is up; errors name what was awaited, say why it was not ready yet and carry
// the end of the process's log.
func WaitUntil(ctx context.Context, p *Process, timeout time.Duration, what string, ready func(context.Context) error) error {
	err := eventually.UntilExit(ctx, p.Done(), timeout, ready)
	if err == nil {
		return nil
	}
	select {
	case <-p.Done():
		return fmt.Errorf("%s exited (%v) before %s was ready; log %s:\n%s", p.Name, p.Err(), what, p.Log, p.LogTail(30))
	default:
		return fmt.Errorf("%s: %s not ready after %v (%v); log %s:\n%s", p.Name, what, timeout, err, p.Log, p.LogTail(30))
	}
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
