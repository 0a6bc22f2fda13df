package webconsole

import "embed"

// pageFiles are vmop's page around the SPICE client.
//
//go:embed web
var pageFiles embed.FS
