package testnode

import (
	"context"
	"fmt"
)

// NetcheckImage is the image of ./netcheck, a TCP client and server for
// pods of network tests (no image the node has can dial or listen).
const NetcheckImage = "vmop.test/netcheck:devel"

// ImportNetcheck builds NetcheckImage and imports it into the node's
// containerd, so that pods find it without a pull.
func (n *Node) ImportNetcheck(ctx context.Context) error {
	archive, err := n.buildImage("netcheck", NetcheckImage)
	if err != nil {
		return err
	}
	return n.ImportImage(ctx, archive)
}

// ImportImage imports an image archive (imagebuild.WriteArchive) into the
// node's containerd, so that pods find the image without a pull.
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	if out, err := n.Containerd.Ctr(ctx, "images", "import", archive).CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import %s: %w\n%s", archive, err, out)
	}
	return nil
}
