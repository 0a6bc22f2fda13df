// Package spicehtml5 embeds the SPICE HTML5 client (spice-html5 0.2.1 from
// the npm registry, LGPL-3.0-or-later) for kubectl vm console --browser.
// Every other file of this directory is the upstream package's with the
// fixes of patches/ applied; hack/vendor-spice-html5.sh copies and patches.
package spicehtml5

import "embed"

// Version is the upstream version embedded.
const Version = "0.2.1"

// Files are the client's modules (src/) and its licence (COPYING.LESSER,
// which builds on COPYING).
//
//go:embed src COPYING COPYING.LESSER README
var Files embed.FS
