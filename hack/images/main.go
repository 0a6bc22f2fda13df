// Command images builds vmop's container images (make images) into OCI
// archives, one per image, and prints their references, digests and sizes;
// with -push it also pushes them (make push-images). No container engine
// is needed: see internal/imagebuild.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/vmop/vmop/internal/imagebuild"
	"github.com/vmop/vmop/pkg/version"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "images: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	o := imagebuild.Options{}
	flag.StringVar(&o.Version, "version", "", "version of the binaries and tag of the images (make passes git describe)")
	flag.StringVar(&o.Registry, "registry", "", "registry and path that name the images (default ghcr.io/vmop)")
	flag.StringVar(&o.Out, "out", "dist/images", "directory of the archives")
	push := flag.String("push", "", "registry and path to push the images to after building, e.g. registry.example:5000/vmop")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	var err error
	if o.Module, err = git("rev-parse", "--show-toplevel"); err != nil {
		return err
	}
	if o.Revision, err = git("rev-parse", "HEAD"); err != nil {
		return err
	}
	ct, err := git("log", "-1", "--format=%ct")
	if err != nil {
		return err
	}
	secs, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return fmt.Errorf("commit time %q: %w", ct, err)
	}
	o.Created = time.Unix(secs, 0).UTC()
	if o.RunnerRoot, err = imagebuild.RunnerRoot(o.Module); err != nil {
		return err
	}

	start := time.Now()
	built, err := imagebuild.Build(o)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "IMAGE\tDIGEST\tCOMPRESSED\tLAYERS (compressed)\tARCHIVE")
	for _, b := range built {
		s, err := imagebuild.Sizes(b.Image)
		if err != nil {
			return err
		}
		digest, _ := b.Image.Digest()
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", b.Ref, digest, mib(s.Total), strings.Join(mibs(s.Layers), " + "), b.Archive)
	}
	w.Flush()
	fmt.Printf("built in %s\n", time.Since(start).Round(time.Second))

	if *push == "" {
		return nil
	}
	for _, b := range built {
		ref, err := name.NewTag(version.Ref(*push, b.Name, b.Ref.TagStr()))
		if err != nil {
			return err
		}
		if err := imagebuild.Push(b.Image, ref); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		fmt.Printf("pushed %s\n", ref)
	}
	return nil
}

func git(args ...string) (string, error) {
	b, err := exec.Command("git", args...).Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(b)), nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func mibs(ns []int64) []string {
	var s []string
	for _, n := range ns {
		s = append(s, mib(n))
	}
	return s
}
