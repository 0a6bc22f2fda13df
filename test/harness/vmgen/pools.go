package vmgen

import "strings"

// pool holds the values of one schema path: usual ones, which a user
// would write, and odd ones, at the edges of what the API server,
// validation and qemu take.
type pool struct {
	usual, odd []any
}

type obj = map[string]any

// pools by schema path. Paths without one get values from their schema.
// Fields copied to the pod verbatim (affinity, resources, nodeSelector, a
// claim's spec) draw from short lists: the API server validates them when
// the rendered objects are applied, which the contract test does too.
var pools = map[string]pool{
	"spec.image": {
		usual: []any{
			obj{"source": "registry.example/vmop/vm-runner:1.0"},
			obj{"repository": "ghcr.io", "path": "vmop/vm-runner", "version": "1.0", "pullPolicy": "IfNotPresent"},
			obj{"path": "vmop/vm-runner", "pullPolicy": "Always"},
		},
		odd: []any{
			obj{},
			obj{"repository": "ghcr.io"},
			obj{"source": "a/b:1", "path": "b"},
			obj{"source": ""},
			obj{"source": "a/b:1", "pullPolicy": ""},
		},
	},
	"spec.cloudInit.metaData": {
		usual: []any{obj{"instance-id": "i-1", "local-hostname": "guest"}, obj{}},
	},
	"spec.cloudInit.userData": {
		usual: []any{
			obj{"users": []any{obj{"name": "admin", "ssh_authorized_keys": []any{"ssh-ed25519 AAAAC3Nza test"}}}},
			"#cloud-config\nhostname: guest\n",
			"#!/bin/sh\necho hello\n",
		},
		odd: []any{42, []any{"a"}, true, ""},
	},
	"spec.cloudInit.networkConfig": {
		usual: []any{obj{"version": 2, "ethernets": obj{"eth0": obj{"dhcp4": true}}}},
		odd:   []any{"version: 2", []any{}, 2},
	},
	"spec.resources": {
		usual: []any{
			obj{"requests": obj{"cpu": "100m", "memory": "128Mi"}},
			obj{"limits": obj{"memory": "2Gi"}, "requests": obj{"memory": "1Gi"}},
			obj{},
		},
		odd: []any{
			obj{"requests": obj{"memory": "-1"}},
			obj{"requests": obj{"cpu": "2"}, "limits": obj{"cpu": "1"}},
			obj{"claims": []any{obj{"name": "gpu"}}},
		},
	},
	"spec.nodeName":     {usual: []any{"node-1"}, odd: []any{"Node_1", ""}},
	"spec.nodeSelector": {usual: []any{obj{"kubernetes.io/arch": "amd64"}, obj{}}, odd: []any{obj{"bad key": "x"}, obj{"a": "bad value!"}}},
	"spec.affinity": {
		usual: []any{
			obj{"nodeAffinity": obj{"requiredDuringSchedulingIgnoredDuringExecution": obj{"nodeSelectorTerms": []any{
				obj{"matchExpressions": []any{obj{"key": "kvm", "operator": "In", "values": []any{"yes"}}}},
			}}}},
			obj{"podAntiAffinity": obj{"preferredDuringSchedulingIgnoredDuringExecution": []any{
				obj{"weight": 10, "podAffinityTerm": obj{"topologyKey": "kubernetes.io/hostname", "labelSelector": obj{"matchLabels": obj{"app": "vm"}}}},
			}}},
		},
		odd: []any{
			obj{"nodeAffinity": obj{"requiredDuringSchedulingIgnoredDuringExecution": obj{"nodeSelectorTerms": []any{
				obj{"matchExpressions": []any{obj{"key": "kvm", "operator": "Near"}}},
			}}}},
		},
	},
	"spec.runnerTemplate.source":      {usual: []any{"", "standard.tmpl", "/opt/vmrunner/templates/Standard-VM-latest.ftl.yaml"}, odd: []any{"dir/x.tmpl", "../standard.tmpl"}},
	"spec.loadBalancerService.labels": {usual: []any{obj{"team": "a"}, obj{"removed": nil}}, odd: []any{obj{"bad key": "x"}, obj{"a": "bad value!"}}},
	"spec.loadBalancerService.annotations": {
		usual: []any{obj{"metallb.universe.tf/loadBalancerIPs": "192.0.2.10"}, obj{"removed": nil}},
		odd:   []any{obj{"bad key": "x"}},
	},
	"spec.vm.machineUuid": {
		usual: []any{"0f4e3ee5-6ad8-4a3c-9fcb-5e2a2b6f5f11", ""},
		odd:   []any{"urn:uuid:0f4e3ee5-6ad8-4a3c-9fcb-5e2a2b6f5f11", "{0f4e3ee5-6ad8-4a3c-9fcb-5e2a2b6f5f11}", "0f4e3ee56ad84a3c9fcb5e2a2b6f5f11", "0F4E3EE5-6AD8-4A3C-9FCB-5E2A2B6F5F11", "nonsense"},
	},
	"spec.vm.powerdownTimeout":           {usual: []any{0, 30, 900}, odd: []any{-1, 1 << 40, 86401}},
	"spec.vm.cpuModel":                   {usual: []any{"", "max", "qemu64", "Nehalem", "host"}, odd: []any{"max,+vmx", "a b", "no-such-cpu"}},
	"spec.vm.maximumCpus":                {usual: []any{1, 2, 4, 8}, odd: []any{0, 300, 4096, 4097}},
	"spec.vm.currentCpus":                {usual: []any{1, 2}, odd: []any{0, 5, 4096}},
	"spec.vm.cpuTopology.sockets":        {usual: []any{0, 1, 2}, odd: []any{3, 4096, -1}},
	"spec.vm.cpuTopology.diesPerSocket":  {usual: []any{0, 1, 2}, odd: []any{3, 4097}},
	"spec.vm.cpuTopology.coresPerDie":    {usual: []any{0, 1, 2}, odd: []any{3, 4096}},
	"spec.vm.cpuTopology.threadsPerCore": {usual: []any{0, 1, 2}, odd: []any{3, 4096}},
	"spec.vm.maximumRam": {
		usual: []any{"256Mi", "512Mi", "1Gi", 268435456, "0.5Gi", "256M", "300M"},
		odd:   []any{"1.5Mi", "100", "1e9", "0", "-1Gi", "1Ki", "4Gx", "1536Ki", 1048577},
	},
	"spec.vm.currentRam": {
		usual: []any{"128Mi", "256Mi", "200M"},
		odd:   []any{"1Ti", "0", "1", "1023Ki", "4Gx"},
	},
	"spec.vm.rtcBase":                {usual: []any{"", "utc", "localtime"}, odd: []any{"2006-06-17", "2006-06-17T16:01:21", "tomorrow", "a,b", "UTC"}},
	"spec.vm.rtcClock":               {usual: []any{"", "host", "rt", "vm"}, odd: []any{"wall", "a,b"}},
	"spec.vm.networks[].tap.device":  {usual: []any{"", "virtio-net", "e1000"}, odd: []any{"no-such-nic", "a,b"}},
	"spec.vm.networks[].user.device": {usual: []any{"", "virtio-net", "e1000", "rtl8139"}, odd: []any{"no-such-nic", "virtio-net-pci", "e1000e", "vmxnet3"}},
	"spec.vm.networks[].tap.bridge":  {usual: []any{"", "br0"}, odd: []any{"a,b", strings.Repeat("b", 16)}},
	"spec.vm.networks[].user.net": {
		usual: []any{"", "10.0.2.0/24", "10.0.3.0/24", "192.168.76.0/24"},
		odd:   []any{"fd00::/64", "10.0.2.0/30", "10.0.2.0/28", "10.0.2.5/24", "10.0.0.0/8", "0.0.0.0/0", "10.0.2.0"},
	},
	"spec.vm.networks[].tap.mac":    {usual: []any{"", "52:54:00:12:34:56"}, odd: []any{"01:00:5e:00:00:01", "52:54:00:12:34", "52-54-00-12-34-56"}},
	"spec.vm.networks[].user.mac":   {usual: []any{"", "52:54:00:12:34:57", "52:54:00:AB:cd:EF"}, odd: []any{"ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00"}},
	"spec.vm.networks[].pod.device": {usual: []any{"", "virtio-net", "e1000"}, odd: []any{"no-such-nic"}},
	"spec.vm.networks[].pod.net": {
		usual: []any{"", "10.0.2.0/24", "10.1.0.0/16"},
		odd:   []any{"fd00::/64", "10.0.2.0/30", "10.0.2.5/24"},
	},
	"spec.vm.networks[].pod.mac":              {usual: []any{"", "52:54:00:12:34:58"}, odd: []any{"01:00:5e:00:00:02"}},
	"spec.vm.networks[].pod.ports[].port":     {usual: []any{22, 80, 443, 53}, odd: []any{0, 70000, 5900}},
	"spec.vm.networks[].pod.ports[].protocol": {usual: []any{"", "TCP", "UDP"}, odd: []any{"SCTP", "tcp"}},
	"spec.vm.disks[].bootindex":               {usual: []any{0, 1, 2, 3}, odd: []any{-1, 1 << 20}},
	"spec.vm.disks[].volumeClaimTemplate.metadata.name": {
		usual: []any{"", "system", "data"},
		odd:   []any{"Bad_Name", strings.Repeat("d", 60), "a.b"},
	},
	"spec.vm.disks[].volumeClaimTemplate.spec": {
		usual: []any{
			obj{"resources": obj{"requests": obj{"storage": "1Gi"}}},
			obj{"accessModes": []any{"ReadWriteOnce"}, "volumeMode": "Block", "storageClassName": "local", "resources": obj{"requests": obj{"storage": "40Gi"}}},
			obj{"volumeName": "pv-1", "resources": obj{"requests": obj{"storage": "1Gi"}}},
			obj{"volumeMode": "Filesystem", "resources": obj{"requests": obj{"storage": "1Gi"}}},
		},
		odd: []any{
			obj{"volumeMode": "Memory", "resources": obj{"requests": obj{"storage": "1Gi"}}},
			obj{"accessModes": []any{"ReadWriteSometimes"}, "resources": obj{"requests": obj{"storage": "1Gi"}}},
			obj{"resources": obj{"requests": obj{"storage": "-1Gi"}}},
			obj{},
			obj{"selector": obj{"matchExpressions": []any{obj{"key": "a", "operator": "In"}}}, "resources": obj{"requests": obj{"storage": "1Gi"}}},
		},
	},
	"spec.vm.disks[].source": {
		usual: []any{
			obj{"url": "https://example.com/images/debian-13.qcow2"},
			obj{"url": "http://127.0.0.1:9/a.raw.xz", "checksum": "sha256:" + strings.Repeat("0123456789abcdef", 4)},
			obj{"file": "images/debian.qcow2", "checksum": "sha512:" + strings.Repeat("0123456789abcdef", 8)},
			obj{"containerDisk": "quay.io/containerdisks/fedora:41"},
			obj{"containerDisk": "localhost:5000/disks/debian@sha256:" + strings.Repeat("0123456789abcdef", 4)},
		},
		odd: []any{
			obj{"containerDisk": "docker://quay.io/a:b"}, obj{"containerDisk": "Quay.io/a"}, obj{"containerDisk": "a:b:c"},
			obj{"containerDisk": "quay.io/a", "url": "http://h/a"}, obj{"containerDisk": "", "file": ""},
			obj{}, obj{"url": "", "file": "a.raw"}, obj{"url": "", "file": ""}, obj{"url": "ftp://h/a"},
			obj{"url": "http://h a"}, obj{"url": "http:///a"}, obj{"file": "../a"}, obj{"file": "a/../b"},
			obj{"file": "..."}, obj{"file": "./a"}, obj{"file": "/abs/a"}, obj{"file": "a//b"},
			obj{"url": "http://h/a", "file": "b"}, obj{"url": "http://h/a", "checksum": "md5:00"},
			obj{"url": "http://h/a", "checksum": ""}, obj{"file": "a", "checksum": "SHA256:" + strings.Repeat("0", 64)},
			obj{"file": "a", "checksum": "sha512:" + strings.Repeat("0", 64)},
		},
	},
	"spec.vm.disks[].cdrom.image": {
		usual: []any{"", "debian.iso", "isos/debian.iso", "/srv/missing.iso", "http://127.0.0.1:9/missing.iso"},
		odd:   []any{"two\nlines.iso", "nul\x00.iso", "a,b.iso"},
	},
	"spec.vm.display.outputs":                                {usual: []any{1, 2, 4}, odd: []any{0, 16, 17}},
	"spec.vm.display.spice.port":                             {usual: []any{5900, 5901}, odd: []any{0, 1, 65535, 65536}},
	"spec.vm.display.spice.usbRedirects":                     {usual: []any{0, 2}, odd: []any{16, 17, -1}},
	"spec.vm.display.spice.streamingVideo":                   {usual: []any{"", "off", "filter", "all"}, odd: []any{"sometimes"}},
	"spec.vm.display.spice.proxyUrl":                         {usual: []any{"", "http://proxy.example:3128"}},
	"spec.vm.display.loggedInUser":                           {usual: []any{"", "admin"}},
	"spec.loggingProperties":                                 {usual: []any{"", ".level=FINE\n"}},
	"spec.vm.disks[].volumeClaimTemplate.metadata.namespace": {usual: []any{"", "default"}},
}
