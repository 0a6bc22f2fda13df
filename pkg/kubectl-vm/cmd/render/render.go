// Package render is "kubectl vm render": VirtualMachine manifests in,
// the StatefulSet, ConfigMap, Secret and Service that run them out, with
// no cluster needed.
package render

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/version"
)

// gcMemoryLimit is the heap size at which rendering collects garbage.
const gcMemoryLimit = 64 << 20

// tuneGC lets the garbage collector run only when the heap reaches
// gcMemoryLimit, unless GOGC or GOMEMLIMIT say otherwise. Rendering makes
// much short-lived garbage over a live heap of about 1 MiB (however long
// the input: documents are streamed), so collecting at every doubling
// spends a third of the time on garbage collection. It returns what
// restores the settings.
func tuneGC() (restore func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	limit := debug.SetMemoryLimit(gcMemoryLimit)
	percent := debug.SetGCPercent(-1)
	return func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	}
}

const example = `  # Render the VMs of a file for kubectl apply, Argo CD or Flux
  %[1]s render -f test-vm.yaml

  # Render every manifest of a directory tree into one namespace, as JSON
  %[1]s render -R -f vms/ -n vmop-demo -o json

  # Render from stdin and apply
  cat test-vm.yaml | %[1]s render -f - | kubectl apply -f -`

// Options are the options of the render command.
type Options struct {
	Filenames []string
	Recursive bool
	Output    string
	Namespace string
	// ImageRegistry names the runner image of VMs without spec.image.
	ImageRegistry string
	// ServiceAccount is the runner pods' account; empty: the namespace's
	// default, or each VM's own with ConfigAccess.
	ServiceAccount string
	// ConfigAccess lets each runner watch its own ConfigMap
	// (render.Options.ConfigAccess).
	ConfigAccess bool

	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
}

// NewCmd makes the render command. The namespace comes from the root's -n
// flag, read as given: rendering never consults a kubeconfig.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "render -f FILENAME",
		Short: "Render VirtualMachine manifests into the objects that run them",
		Long: `Render VirtualMachine manifests (vmoperator.jdrupes.org/v1) into the
StatefulSet, ConfigMap, Secret and Service that run them, and the Role that
lets each runner watch its own ConfigMap, ready for kubectl
apply, Argo CD, Flux or kustomize. No cluster is needed. Documents that are
not VirtualMachines are passed through unchanged.

Every problem of the input is reported as FILE: document N: VM: FIELD: ...
and then nothing is written: there is no partial output.`,
		Example:           fmt.Sprintf(example, name),
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run()
		},
	}
	cmd.Flags().StringSliceVarP(&o.Filenames, "filename", "f", nil, "file, directory or - (stdin) with manifests; may repeat")
	cmd.Flags().BoolVarP(&o.Recursive, "recursive", "R", false, "process the directories given with -f recursively")
	cmd.Flags().StringVar(&o.ServiceAccount, "service-account", "", "ServiceAccount of the runner pods, e.g. vm-runner bound to the ClusterRole vm-runner, so that runners may report events and stop their VM for good (default: each VM's own, NAME-runner, with --config-access; else the namespace's default account)")
	cmd.Flags().BoolVar(&o.ConfigAccess, "config-access", true, "let each runner get and watch its own ConfigMap, by name (a Role and RoleBinding NAME-runner, and a ServiceAccount NAME-runner unless --service-account names one), so that a live change reaches the guest in a second; false: at the kubelet's refresh of the config volume, about a minute")
	cmd.Flags().StringVar(&o.ImageRegistry, "image-registry", "", "registry and path of vmop's runner image for VMs without spec.image, e.g. a mirror for an air-gapped cluster (default "+version.Registry+")")
	cmd.Flags().StringVarP(&o.Output, "output", "o", manifest.FormatYAML, "output format: "+strings.Join(manifest.Formats, " or "))
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(manifest.Formats, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// Complete takes the namespace from the root's flags.
func (o *Options) Complete() error {
	if o.configFlags != nil && o.configFlags.Namespace != nil {
		o.Namespace = *o.configFlags.Namespace
	}
	return nil
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if len(o.Filenames) == 0 {
		return errors.New("no input: give manifests with -f FILE, -f DIR or -f - for stdin")
	}
	if !slices.Contains(manifest.Formats, o.Output) {
		return fmt.Errorf("--output %q is not supported: use one of %s", o.Output, strings.Join(manifest.Formats, ", "))
	}
	if o.Namespace != "" {
		if msgs := validation.IsDNS1123Label(o.Namespace); len(msgs) > 0 {
			return fmt.Errorf("--namespace %q: %s", o.Namespace, strings.Join(msgs, "; "))
		}
	}
	if o.ImageRegistry != "" {
		if err := version.ValidateRegistry(o.ImageRegistry); err != nil {
			return fmt.Errorf("--image-registry: %w", err)
		}
	}
	if o.ServiceAccount != "" {
		if msgs := validation.IsDNS1123Subdomain(o.ServiceAccount); len(msgs) > 0 {
			return fmt.Errorf("--service-account %q: %s", o.ServiceAccount, strings.Join(msgs, "; "))
		}
	}
	return nil
}

// Run renders into a temporary file and copies it to the output only when
// the whole input was valid: memory stays flat however long the input, and
// a bad document never leaves half an output behind.
func (o *Options) Run() error {
	defer tuneGC()()
	sources, err := o.sources()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp("", "kubectl-vm-render-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	w, err := manifest.NewWriter(tmp, o.Output)
	if err != nil {
		return err
	}
	opts := render.StreamOptions{
		Options:   render.Options{ImageRegistry: o.ImageRegistry, ServiceAccount: o.ServiceAccount, ConfigAccess: o.ConfigAccess},
		Namespace: o.Namespace,
		Warn: func(p render.Problem) {
			fmt.Fprintf(o.ErrOut, "Warning: %s\n", p)
		},
	}
	var problems []render.Problem
	for _, src := range sources {
		ps, err := o.renderSource(src, w, opts)
		if err != nil {
			return err
		}
		problems = append(problems, ps...)
		if len(problems) > 0 {
			opts.Warn = nil // the output is void; only errors matter now
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(o.ErrOut, p)
		}
		return fmt.Errorf("%d problem(s) in the input, nothing rendered", len(problems))
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	_, err = io.Copy(o.Out, tmp)
	return err
}

func (o *Options) renderSource(src string, w *manifest.Writer, opts render.StreamOptions) ([]render.Problem, error) {
	if src == "-" {
		return render.Stream(o.In, src, w, opts)
	}
	f, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return render.Stream(f, src, w, opts)
}

// sources expands directories into their manifest files, sorted, like
// kubectl apply -f does.
func (o *Options) sources() ([]string, error) {
	var out []string
	for _, name := range o.Filenames {
		if name == "-" {
			out = append(out, name)
			continue
		}
		info, err := os.Stat(name)
		if err != nil {
			return nil, fmt.Errorf("-f %s: %w", name, unwrapPathError(err))
		}
		if !info.IsDir() {
			out = append(out, name)
			continue
		}
		err = filepath.WalkDir(name, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != name && !o.Recursive {
					return filepath.SkipDir
				}
				return nil
			}
			switch filepath.Ext(path) {
			case ".yaml", ".yml", ".json":
				out = append(out, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("-f %s: %w", name, err)
		}
	}
	return out, nil
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
