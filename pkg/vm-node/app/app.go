// Package app is vm-node's command: vmop's node agent, the one privileged
// part of vmop, one per node (a DaemonSet). It serves the kubelet a device
// plugin (pkg/vm-node/deviceplugin) that gives VM pods their devices, and
// does for each VM pod of its node what only root can (pkg/vm-node/agent).
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/vmop/vmop/pkg/kubeapi"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vm-node/agent"
	"github.com/vmop/vmop/pkg/vm-node/deviceplugin"
)

// DefaultKubeletRootDir is the kubelet's default --root-dir.
const DefaultKubeletRootDir = "/var/lib/kubelet"

// Options are vm-node's flags.
type Options struct {
	Kubeconfig         string
	NodeName           string
	KubeletRootDir     string
	RunnerRepositories []string
	DevicePluginDir    string

	client *kubeapi.Client
	log    *slog.Logger
}

// NewCmd makes the vm-node command.
func NewCmd(stderr io.Writer) *cobra.Command {
	o := &Options{log: slog.New(slog.NewTextHandler(stderr, nil))}
	cmd := &cobra.Command{
		Use:   "vm-node",
		Short: "vmop's node agent: devices and pod networks for unprivileged VM pods",
		Long: `vm-node runs on every node that runs VMs (kubectl vm install puts it there as
a DaemonSet). It gives VM pods /dev/kvm, /dev/net/tun and /dev/vhost-net
through a kubelet device plugin (resource devices.vmop.io/vm), and, inside
each VM pod's own namespaces, the ownership of its disks and the guest's
side of its pod network, so that the VM pod itself needs no privilege.`,
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
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (a token or a client certificate); empty means the pod's service account")
	f.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "the node this agent serves (default $NODE_NAME)")
	f.StringVar(&o.KubeletRootDir, "kubelet-root-dir", DefaultKubeletRootDir, "the kubelet's --root-dir, which holds the pods' volumes")
	f.StringArrayVar(&o.RunnerRepositories, "runner-repository", []string{version.Registry + "/" + version.RunnerImage},
		"image repository (no tag) of a runner image to serve; repeat for more")
	f.StringVar(&o.DevicePluginDir, "device-plugin-dir", "", "the kubelet's device plugin directory (default /var/lib/kubelet/device-plugins/, whatever the root dir)")
	return cmd
}

// Complete makes the client: the pod's service account, or the
// kubeconfig given.
func (o *Options) Complete() error {
	cfg, err := kubeapi.InCluster()
	if o.Kubeconfig != "" {
		cfg, err = kubeapi.FromKubeconfig(o.Kubeconfig)
	}
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "vm-node/" + version.Get()
	o.client, err = kubeapi.New(cfg)
	return err
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if o.NodeName == "" {
		return errors.New("--node-name: empty, and no $NODE_NAME")
	}
	if !filepath.IsAbs(o.KubeletRootDir) {
		return fmt.Errorf("--kubelet-root-dir %q: not an absolute path", o.KubeletRootDir)
	}
	if _, err := os.Stat(filepath.Join(o.KubeletRootDir, "pods")); err != nil {
		return fmt.Errorf("--kubelet-root-dir %s: %w (give the kubelet's --root-dir, mounted at the same path)", o.KubeletRootDir, err)
	}
	return nil
}

// Run serves until ctx ends.
func (o *Options) Run(ctx context.Context) error {
	a, err := agent.New(agent.Options{
		Watch: func(ctx context.Context, query url.Values, h kubeapi.Handler[agent.Pod]) error {
			return kubeapi.Watch(ctx, o.client, "/api/v1/pods", query, h, o.log)
		},
		Create: func(ctx context.Context, path string, obj any) error {
			return o.client.Create(ctx, path, obj, nil)
		},
		NodeName: o.NodeName, KubeletRootDir: o.KubeletRootDir,
		RunnerRepositories: o.RunnerRepositories, Log: o.log,
	})
	if err != nil {
		return err
	}
	o.log.Info("vm-node starting", "version", version.Get(), "node", o.NodeName)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.Run(ctx) })
	g.Go(func() error {
		return deviceplugin.New(deviceplugin.Options{Log: o.log, Dir: o.DevicePluginDir}).Run(ctx)
	})
	return g.Wait()
}
