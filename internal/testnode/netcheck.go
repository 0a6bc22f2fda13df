package testnode

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/vmop/vmop/internal/imagebuild"
	"github.com/vmop/vmop/internal/testcluster"
)

// NetcheckImage is the image of ./netcheck, a TCP client and server for
// pods of network tests (no image the node has can dial or listen).
const NetcheckImage = "vmop.test/netcheck:devel"

// ImportNetcheck builds NetcheckImage and imports it into the node's
// containerd, so that pods find it without a pull.
func (n *Node) ImportNetcheck(ctx context.Context) error {
	module, err := testcluster.ModuleRoot()
	if err != nil {
		return err
	}
	b, err := imagebuild.Program(imagebuild.Options{
		Module:   module,
		Version:  "devel",
		Registry: "vmop.test",
		Created:  time.Unix(0, 0).UTC(),
		Out:      filepath.Join(n.dir, "netcheck"),
	}, "netcheck", "./internal/testnode/netcheck")
	if err != nil {
		return err
	}
	if b.Ref.String() != NetcheckImage {
		return fmt.Errorf("netcheck image is %s, tests expect %s", b.Ref, NetcheckImage)
	}
	if out, err := n.Containerd.Ctr(ctx, "images", "import", b.Archive).CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import: %w: %s", err, out)
	}
	return nil
}
