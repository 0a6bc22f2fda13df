// Package diskimport fills one disk (a block device, or a regular file in
// tests) from one image: a cloud image fetched over http(s) by the
// runner's import init container (package vmimport, which goes through a
// VM's disks and reports on the VM), or a local image piped in by an
// upload.
//
// The source is streamed once into a sparse staging file (hashed as served,
// decompressed on the fly), verified, probed with qemu-img and only then
// converted onto the disk, so a bad download never touches the disk.
// Records kept beside the VM's other state make sure a disk is imported at
// most once and a disk that holds data is never overwritten.
package diskimport
