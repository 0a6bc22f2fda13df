// Package app is the vm-operator command: flags, client set-up,
// leader election, the metrics and health endpoints and a graceful stop
// around pkg/vm-operator/controller.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vm-operator/controller"
	"github.com/vmop/vmop/pkg/vm-operator/vmmetrics"
)

// Options are vm-operator's flags.
type Options struct {
	Kubeconfig string
	Namespaces []string
	Workers    int
	Resync     time.Duration
	QPS        float32
	Burst      int

	LeaderElect        bool
	LeaderElectionNS   string
	LeaderElectionID   string
	LeaseDuration      time.Duration
	RenewDeadline      time.Duration
	RetryPeriod        time.Duration
	MetricsAddress     string
	HealthProbeAddress string
	LogFormat          string
	Verbosity          int
	RunnerAccount      bool
	ImageRegistry      string

	config *rest.Config
	log    logr.Logger
	stderr io.Writer
}

// NewCmd makes the vm-operator command.
func NewCmd(stderr io.Writer) *cobra.Command {
	o := &Options{stderr: stderr}
	cmd := &cobra.Command{
		Use:   "vm-operator",
		Short: "Run VirtualMachines: render them into StatefulSets and report their status",
		Long: `vm-operator watches VirtualMachine resources (vmoperator.jdrupes.org/v1),
applies what pkg/render makes of them (StatefulSet, ConfigMap, Secrets,
Service) with server-side apply and writes each VM's status.

Run it in the cluster (kubectl vm install) or, for development, on a
workstation with --kubeconfig.`,
		Version:       version.Get(),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty means the pod's service account (in cluster) or $KUBECONFIG")
	f.StringSliceVar(&o.Namespaces, "namespaces", nil, "namespaces to watch (comma-separated); empty means all")
	f.IntVar(&o.Workers, "workers", 4, "VMs reconciled in parallel")
	f.DurationVar(&o.Resync, "resync", 10*time.Minute, "how often every VM is reconciled again even without events")
	f.Float32Var(&o.QPS, "kube-api-qps", 100, "requests per second to the API server")
	f.IntVar(&o.Burst, "kube-api-burst", 200, "request burst to the API server")
	f.BoolVar(&o.LeaderElect, "leader-elect", true, "take a Lease before working, so that of several replicas only one writes")
	f.StringVar(&o.LeaderElectionNS, "leader-election-namespace", "", "namespace of the Lease; empty means $POD_NAMESPACE or "+install.DefaultNamespace)
	f.StringVar(&o.LeaderElectionID, "leader-election-id", "vm-operator", "name of the Lease")
	f.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a Lease holds without renewal")
	f.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader tries to renew before it gives up")
	f.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often candidates try to take the Lease")
	f.StringVar(&o.MetricsAddress, "metrics-bind-address", ":8080", "address of /metrics; 0 disables it")
	f.StringVar(&o.HealthProbeAddress, "health-probe-bind-address", ":8081", "address of /healthz and /readyz; 0 disables them")
	f.StringVar(&o.LogFormat, "log-format", "text", "log format: text or json")
	f.IntVarP(&o.Verbosity, "v", "v", 0, "log verbosity (2 logs every write)")
	f.BoolVar(&o.RunnerAccount, "runner-service-account", true, "give runner pods the "+install.RunnerServiceAccount+" service account, bound to the "+install.RunnerClusterRole+" ClusterRole, in each VM namespace")
	f.StringVar(&o.ImageRegistry, "image-registry", "", "registry and path of vmop's runner image for VMs without spec.image, e.g. a mirror for an air-gapped cluster (default "+version.Registry+"; the tag is the operator's version)")
	return cmd
}

// Complete fills in defaults and makes the client config and logger.
func (o *Options) Complete() error {
	if o.LeaderElectionNS == "" {
		o.LeaderElectionNS = os.Getenv("POD_NAMESPACE")
	}
	if o.LeaderElectionNS == "" {
		o.LeaderElectionNS = install.DefaultNamespace
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	// No gzip: the API server is near, and compressing its lists and
	// watches cost both sides CPU (BenchmarkScale, 1,000 VMs: 8.2-8.6 ms
	// per VM without it, 9.0-9.4 with it).
	cfg.DisableCompression = true
	cfg.UserAgent = "vm-operator/" + version.Get()
	o.config = cfg
	return nil
}

// Validate checks the flags.
func (o *Options) Validate() error {
	switch {
	case o.Workers < 1:
		return fmt.Errorf("--workers must be at least 1, not %d", o.Workers)
	case o.Resync < time.Second:
		return fmt.Errorf("--resync must be at least 1s, not %v", o.Resync)
	case o.LogFormat != "text" && o.LogFormat != "json":
		return fmt.Errorf("--log-format must be text or json, not %q", o.LogFormat)
	case o.LeaderElect && o.RenewDeadline >= o.LeaseDuration:
		return fmt.Errorf("--leader-elect-renew-deadline (%v) must be less than --leader-elect-lease-duration (%v)", o.RenewDeadline, o.LeaseDuration)
	case o.LeaderElect && o.RetryPeriod >= o.RenewDeadline:
		return fmt.Errorf("--leader-elect-retry-period (%v) must be less than --leader-elect-renew-deadline (%v)", o.RetryPeriod, o.RenewDeadline)
	}
	for _, ns := range o.Namespaces {
		if strings.TrimSpace(ns) == "" {
			return errors.New("--namespaces has an empty entry")
		}
	}
	if o.ImageRegistry != "" {
		if err := version.ValidateRegistry(o.ImageRegistry); err != nil {
			return fmt.Errorf("--image-registry: %w", err)
		}
	}
	return nil
}

// Run works until ctx ends (SIGTERM), then stops the workers, gives up
// the Lease so that a standby takes over at once, and returns.
func (o *Options) Run(ctx context.Context) error {
	opts := &slog.HandlerOptions{Level: slog.Level(-o.Verbosity)}
	var h slog.Handler = slog.NewTextHandler(o.stderr, opts)
	if o.LogFormat == "json" {
		h = slog.NewJSONHandler(o.stderr, opts)
	}
	o.log = logr.FromSlogHandler(h)
	klog.SetLogger(o.log)
	ctx = klog.NewContext(ctx, o.log)

	kube, err := kubernetes.NewForConfig(o.config)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(o.config)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := controller.Config{Namespaces: o.Namespaces, Resync: o.Resync, Metrics: controller.NewMetrics(reg), ImageRegistry: o.ImageRegistry}
	if o.RunnerAccount {
		cfg.RunnerAccess = install.RunnerAccess
	}
	c := controller.New(kube, dyn, cfg)
	reg.MustRegister(vmmetrics.New(vmmetrics.FromListers(c.VMListers()...)))

	// Ready once the caches are filled, or while waiting as a standby.
	var leading atomic.Bool
	ready := func() bool { return !leading.Load() || c.HasSynced() }
	stopServers, err := o.serve(ctx, reg, ready)
	if err != nil {
		return err
	}
	defer stopServers()

	o.log.Info("Starting vm-operator", "version", version.Get(), "namespaces", o.Namespaces, "workers", o.Workers, "leaderElect", o.LeaderElect)
	if !o.LeaderElect {
		leading.Store(true)
		return c.Run(ctx, o.Workers)
	}
	host, _ := os.Hostname()
	id := host + "_" + uuid.NewString()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.LeaderElectionNS, Name: o.LeaderElectionID},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	var runErr error
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.LeaseDuration,
		RenewDeadline:   o.RenewDeadline,
		RetryPeriod:     o.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            o.LeaderElectionID,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				leading.Store(true)
				o.log.Info("Became the leader", "identity", id)
				runErr = c.Run(ctx, o.Workers)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					// Another replica may write now; this one must not.
					runErr = errors.New("lost the leader election lease")
				}
			},
			OnNewLeader: func(identity string) {
				if identity != id {
					o.log.Info("Standing by; another replica leads", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	le.Run(ctx)
	return runErr
}

// serve starts the metrics and health endpoints; the returned function
// stops them.
func (o *Options) serve(ctx context.Context, reg *prometheus.Registry, ready func() bool) (func(), error) {
	var servers []*http.Server
	start := func(addr string, mux *http.ServeMux) error {
		if addr == "0" || addr == "" {
			return nil
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", addr, err)
		}
		s := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, s)
		go func() {
			if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				o.log.Error(err, "HTTP server failed", "address", addr)
			}
		}()
		o.log.Info("Serving", "address", l.Addr().String())
		return nil
	}
	stop := func() {
		for _, s := range servers {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = s.Shutdown(sctx)
			cancel()
		}
	}
	metrics := http.NewServeMux()
	metrics.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "informer caches not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if err := start(o.MetricsAddress, metrics); err != nil {
		return nil, err
	}
	if err := start(o.HealthProbeAddress, health); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}
