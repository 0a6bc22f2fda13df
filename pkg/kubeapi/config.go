// Package kubeapi is vmop's own small client of the Kubernetes API, for
// the programs that run beside every VM (vm-node on each node, vm-runner
// in each VM's pod): list and watch a collection, get, create and patch
// an object. It stands in for client-go, whose code (with the protobuf
// methods of every API type it keeps) would make up most of their
// binaries and so of their resident memory, and it imports nothing of
// k8s.io: callers decode objects into their own structs with only the
// fields they need.
package kubeapi

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// Config says how to reach and authenticate to the API server.
type Config struct {
	Server   string // https://host:port
	CAData   []byte // PEM; nil: the system's roots
	Insecure bool   // insecure-skip-tls-verify (kubeconfigs of tests)
	Token    string
	// TokenFile holds the token and wins over Token once read. It is read
	// again at most once a minute, and on a 401: bound service account
	// tokens rotate (about hourly).
	TokenFile         string
	CertData, KeyData []byte // PEM client certificate and key
	UserAgent         string
	// WrapTransport, if set, wraps the transport: tests count requests
	// or act as another user with it.
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// ErrNotInCluster is InCluster's error outside a pod.
var ErrNotInCluster = errors.New("not running in a Kubernetes pod")

// serviceAccountDir is where the kubelet mounts a pod's service account.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// InCluster is the config of the pod's service account: the API server of
// $KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT, the mounted CA and
// token.
func InCluster() (*Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("%w: $KUBERNETES_SERVICE_HOST and $KUBERNETES_SERVICE_PORT are not set (use a kubeconfig)", ErrNotInCluster)
	}
	tokenFile := filepath.Join(serviceAccountDir, "token")
	if _, err := os.Stat(tokenFile); err != nil {
		return nil, fmt.Errorf("in-cluster config: service account token: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(serviceAccountDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("in-cluster config: service account CA: %w", err)
	}
	return &Config{Server: "https://" + net.JoinHostPort(host, port), CAData: ca, TokenFile: tokenFile}, nil
}

// kubeconfig is the part of a kubeconfig file that FromKubeconfig reads.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Contexts       []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
	Clusters []struct {
		Name    string  `json:"name"`
		Cluster cluster `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User user   `json:"user"`
	} `json:"users"`
}

// cluster and user are entries of a kubeconfig; []byte fields are base64
// in the file.
type cluster struct {
	Server                   string `json:"server"`
	CertificateAuthority     string `json:"certificate-authority"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
}

type user struct {
	Token                 string `json:"token"`
	TokenFile             string `json:"tokenFile"`
	ClientCertificate     string `json:"client-certificate"`
	ClientCertificateData []byte `json:"client-certificate-data"`
	ClientKey             string `json:"client-key"`
	ClientKeyData         []byte `json:"client-key-data"`
	// Authentication that is not supported, read to refuse it rather than
	// to connect as someone else.
	Exec         any    `json:"exec"`
	AuthProvider any    `json:"auth-provider"`
	Username     string `json:"username"`
	Password     string `json:"password"`
	As           string `json:"as"`
}

// unsupported names the authentication of u that FromKubeconfig does not
// support, or is "".
func (u *user) unsupported() string {
	switch {
	case u.Exec != nil:
		return "an exec plugin"
	case u.AuthProvider != nil:
		return "an auth-provider"
	case u.Username != "" || u.Password != "":
		return "username/password"
	case u.As != "":
		return "impersonation (as)"
	}
	return ""
}

// FromKubeconfig reads the cluster and user of the current context of the
// kubeconfig at path. It supports a token, a token file and a client
// certificate; other authentication is an error. Relative file names are
// relative to the kubeconfig's directory, as for kubectl.
func FromKubeconfig(path string) (*Config, error) {
	cfg, err := fromKubeconfig(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

func fromKubeconfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return nil, err
	}
	if kc.CurrentContext == "" {
		return nil, errors.New("no current-context")
	}
	var clusterName, userName string
	found := false
	for _, c := range kc.Contexts {
		if c.Name == kc.CurrentContext {
			clusterName, userName, found = c.Context.Cluster, c.Context.User, true
		}
	}
	if !found {
		return nil, fmt.Errorf("current-context %q is not among the contexts", kc.CurrentContext)
	}
	var cl *cluster
	for i := range kc.Clusters {
		if kc.Clusters[i].Name == clusterName {
			cl = &kc.Clusters[i].Cluster
		}
	}
	if cl == nil || cl.Server == "" {
		return nil, fmt.Errorf("context %q: no cluster %q with a server", kc.CurrentContext, clusterName)
	}
	dir := filepath.Dir(path)
	cfg := &Config{Server: cl.Server, CAData: cl.CertificateAuthorityData, Insecure: cl.InsecureSkipTLSVerify}
	if cfg.CAData == nil && cl.CertificateAuthority != "" {
		if cfg.CAData, err = os.ReadFile(resolve(dir, cl.CertificateAuthority)); err != nil {
			return nil, fmt.Errorf("cluster %q: %w", clusterName, err)
		}
	}
	if userName == "" {
		return cfg, nil // anonymous, as for kubectl
	}
	var u *user
	for i := range kc.Users {
		if kc.Users[i].Name == userName {
			u = &kc.Users[i].User
		}
	}
	if u == nil {
		return nil, fmt.Errorf("context %q: no user %q", kc.CurrentContext, userName)
	}
	if what := u.unsupported(); what != "" {
		return nil, fmt.Errorf("user %q authenticates with %s, which is not supported here: use token, tokenFile, or client-certificate(-data) with client-key(-data)", userName, what)
	}
	cfg.Token, cfg.CertData, cfg.KeyData = u.Token, u.ClientCertificateData, u.ClientKeyData
	if u.TokenFile != "" {
		cfg.TokenFile = resolve(dir, u.TokenFile)
	}
	if cfg.CertData == nil && u.ClientCertificate != "" {
		if cfg.CertData, err = os.ReadFile(resolve(dir, u.ClientCertificate)); err != nil {
			return nil, fmt.Errorf("user %q: %w", userName, err)
		}
	}
	if cfg.KeyData == nil && u.ClientKey != "" {
		if cfg.KeyData, err = os.ReadFile(resolve(dir, u.ClientKey)); err != nil {
			return nil, fmt.Errorf("user %q: %w", userName, err)
		}
	}
	if (cfg.CertData == nil) != (cfg.KeyData == nil) {
		return nil, fmt.Errorf("user %q has a client certificate or key without the other", userName)
	}
	return cfg, nil
}

// resolve makes a file name of a kubeconfig absolute.
func resolve(dir, name string) string {
	if filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(dir, name)
}
