// Package gitops makes the container images of the GitOps controllers that
// the node tests run as pods from their upstream install manifests: Argo CD
// with the Redis it uses, and Flux's source-controller and
// kustomize-controller. The binaries and manifests come from
// hack/build-gitops.sh, the Debian root under Argo CD and Redis from
// hack/gitops-root.sh; internal/imagebuild.Prebuilt writes the images. It
// is a test harness rather than part of internal/imagebuild because these
// images are test fixtures, never published with vmop's.
package gitops

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/vmop/vmop/internal/imagebuild"

	"github.com/vmop/vmop/test/harness/testcache"
)

// The versions hack/build-gitops.sh builds.
const (
	ArgoCDVersion = "v3.1.16"
	FluxVersion   = "v1.9.6"
)

// The images' references, to replace upstream's in their manifests.
const (
	ArgoCDImage              = "vmop.test/argocd:" + ArgoCDVersion
	RedisImage               = "vmop.test/redis:trixie"
	SourceControllerImage    = "vmop.test/source-controller:" + FluxVersion
	KustomizeControllerImage = "vmop.test/kustomize-controller:" + FluxVersion
)

// Build is what Images made.
type Build struct {
	// Dir is hack/build-gitops.sh's cache: the binaries, and upstream's
	// manifests under manifests/ (Manifests).
	Dir string
	// Images are the four images, archives to import into a node's
	// containerd.
	Images []imagebuild.Built
}

// Manifests is the directory of upstream's install manifests:
// argocd/install.yaml, and each Flux controller's config/ tree as
// source-controller/ and kustomize-controller/.
func (b Build) Manifests() string { return filepath.Join(b.Dir, "manifests") }

// created is the images' creation time, fixed so that the same inputs give
// the same digests (the root's files are as old as hack/debian-root.sh
// makes them).
var created = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// archiveFormat is part of each archive's cache key: change it when what
// imagebuild writes for the same inputs changes.
const archiveFormat = "1"

// argoCDCommands are the names Argo CD's multi-call binary answers to, as
// upstream's Dockerfile links them in /usr/local/bin.
var argoCDCommands = []string{
	"argocd-server", "argocd-repo-server", "argocd-cmp-server", "argocd-application-controller",
	"argocd-dex", "argocd-notifications", "argocd-applicationset-controller", "argocd-k8s-auth",
	"argocd-commit-server",
}

// Images builds the images with the scripts of the module at module (the
// first run on a machine builds the controllers: minutes) and returns
// them. The archives are cached beside the binaries, keyed by their
// inputs: a warm call only reads them.
func Images(module string) (Build, error) {
	dir, err := script(module, "build-gitops.sh")
	if err != nil {
		return Build{}, err
	}
	root, err := script(module, "gitops-root.sh")
	if err != nil {
		return Build{}, err
	}
	b := Build{Dir: dir}
	for _, spec := range specs(dir, root) {
		built, err := cached(filepath.Join(dir, "images"), spec)
		if err != nil {
			return Build{}, err
		}
		b.Images = append(b.Images, built)
	}
	return b, nil
}

// specs are the images of the binaries in dir on the Debian root at root.
func specs(dir, root string) []imagebuild.PrebuiltImage {
	links := map[string]string{}
	for _, c := range argoCDCommands {
		links["usr/local/bin/"+c] = "/usr/local/bin/argocd"
	}
	flux := func(controller, ref string, env ...string) imagebuild.PrebuiltImage {
		return imagebuild.PrebuiltImage{
			Name: controller, Ref: ref,
			Binary: filepath.Join(dir, controller), At: "usr/local/bin/" + controller,
			// Upstream's manifests give arguments only.
			Entrypoint: []string{"/usr/local/bin/" + controller},
			Env:        env,
			User:       "65534:65534",
			Description: "Flux's " + controller + " " + FluxVersion +
				" built from the module proxy, for vmop's tests",
			Source: "https://github.com/fluxcd/" + controller,
		}
	}
	return []imagebuild.PrebuiltImage{
		{
			Name: "argocd", Ref: ArgoCDImage,
			Binary: filepath.Join(dir, "argocd"), At: "usr/local/bin/argocd",
			Root: root, Symlinks: links,
			// Upstream's entrypoint is tini, which runs the pod's
			// arguments: without it they run as they are.
			User:        "999:999",
			Env:         []string{"HOME=/home/argocd", "USER=argocd"},
			WorkingDir:  "/home/argocd",
			Description: "Argo CD " + ArgoCDVersion + " built from the module proxy on Debian 13, for vmop's tests",
			Source:      "https://github.com/argoproj/argo-cd",
		},
		{
			Name: "redis", Ref: RedisImage, Root: root,
			// argocd-redis gives the server's arguments only, and runs
			// as uid 999.
			Entrypoint:  []string{"/usr/bin/redis-server"},
			User:        "999:999",
			Description: "Debian 13's redis-server for Argo CD in vmop's tests",
		},
		flux("source-controller", SourceControllerImage),
		// As upstream's image sets it: gpg's home on the writable /tmp.
		flux("kustomize-controller", KustomizeControllerImage, "GNUPGHOME=/tmp"),
	}
}

// cached returns the image of spec from the cache at dir, writing it
// first if missing.
func cached(dir string, spec imagebuild.PrebuiltImage) (imagebuild.Built, error) {
	j, err := json.Marshal(spec)
	if err != nil {
		return imagebuild.Built{}, err
	}
	sum := sha256.Sum256([]byte(archiveFormat + "\n" + created.String() + "\n" + string(j)))
	o := imagebuild.Options{Out: filepath.Join(dir, spec.Name+"-"+hex.EncodeToString(sum[:8])), Created: created}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return imagebuild.Built{}, err
	}
	unlock, err := testcache.Lock(filepath.Join(dir, ".lock"))
	if err != nil {
		return imagebuild.Built{}, err
	}
	defer unlock()
	// WriteArchive renames the archive into place: if it is there, it is
	// whole.
	archive := filepath.Join(o.Out, spec.Name+".tar")
	if _, err := os.Stat(archive); err == nil {
		ref, err := name.NewTag(spec.Ref)
		if err != nil {
			return imagebuild.Built{}, err
		}
		img, err := imagebuild.ReadArchive(archive, ref)
		if err != nil {
			return imagebuild.Built{}, fmt.Errorf("%s: %w", archive, err)
		}
		return imagebuild.Built{Name: spec.Name, Ref: ref, Archive: archive, Image: img}, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return imagebuild.Built{}, err
	}
	return imagebuild.Prebuilt(o, spec)
}

// script runs hack/<name> of module, which prints the directory it made.
func script(module, name string) (string, error) {
	cmd := exec.Command(filepath.Join(module, "hack", name))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/%s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}
