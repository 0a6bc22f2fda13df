package v1_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/dynamic"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	vmv1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// fullVM sets every spec field of the schema (checked below), so that a
// property the API server would prune shows up as a difference.
const fullVM = `
apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  name: full
spec:
  image:
    repository: ghcr.io
    path: mnlipp/org.jdrupes.vmoperator.runner.qemu-arch
    version: "4.0"
    pullPolicy: IfNotPresent
  guestShutdownStops: true
  cloudInit:
    metaData:
      instance-id: full-1
      local-hostname: full
    userData:
      users:
        - name: admin
          ssh_authorized_keys: [ssh-ed25519 AAAAC3Nza test]
      packages: [qemu-guest-agent]
    networkConfig:
      version: 2
      ethernets:
        eth0: {dhcp4: true}
  resources:
    limits: {cpu: "4", memory: 9Gi}
    requests: {cpu: 500m, memory: 8589934592}
  nodeName: node-1
  nodeSelector:
    kubernetes.io/arch: amd64
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions:
              - {key: kvm, operator: In, values: ["yes"]}
            matchFields:
              - {key: metadata.name, operator: NotIn, values: [node-2]}
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 10
          preference:
            matchExpressions:
              - {key: disk, operator: In, values: [ssd]}
            matchFields:
              - {key: metadata.name, operator: In, values: [node-1]}
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector:
            matchLabels: {app: db}
            matchExpressions:
              - {key: tier, operator: In, values: [backend]}
          namespaces: [other]
          topologyKey: kubernetes.io/hostname
          namespaceSelector:
            matchLabels: {team: a}
            matchExpressions:
              - {key: env, operator: NotIn, values: [prod]}
          matchLabelKeys: [pod-template-hash]
          mismatchLabelKeys: [tenant]
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 5
          podAffinityTerm:
            labelSelector:
              matchLabels: {app: cache}
              matchExpressions:
                - {key: tier, operator: In, values: [cache]}
            namespaces: [other]
            topologyKey: topology.kubernetes.io/zone
            namespaceSelector:
              matchLabels: {team: b}
              matchExpressions:
                - {key: env, operator: NotIn, values: [prod]}
            matchLabelKeys: [a]
            mismatchLabelKeys: [b]
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector:
            matchLabels: {app: vm}
            matchExpressions:
              - {key: tier, operator: In, values: [vm]}
          namespaces: [vms]
          topologyKey: kubernetes.io/hostname
          namespaceSelector:
            matchLabels: {team: c}
            matchExpressions:
              - {key: env, operator: In, values: [dev]}
          matchLabelKeys: [c]
          mismatchLabelKeys: [d]
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 1
          podAffinityTerm:
            labelSelector:
              matchLabels: {app: vm}
              matchExpressions:
                - {key: tier, operator: In, values: [cache]}
            namespaces: [vms]
            topologyKey: kubernetes.io/hostname
            namespaceSelector:
              matchLabels: {team: d}
              matchExpressions:
                - {key: env, operator: In, values: [test]}
            matchLabelKeys: [e]
            mismatchLabelKeys: [f]
  runnerTemplate:
    source: custom.ftl.yaml
    update: false
  loadBalancerService:
    labels:
      team: a
      removed: null
    annotations:
      metallb.universe.tf/loadBalancerIPs: 192.168.1.10
      removed: null
  permissions:
    - user: admin
      may: ["*"]
    - role: user
      may: [accessConsole, start]
  pools: [test-pool]
  loggingProperties: |
    .level=FINE
  vm:
    state: Stopped
    machineUuid: 0f4e3ee5-6ad8-4a3c-9fcb-5e2a2b6f5f11
    useTpm: true
    firmware: uefi-4m
    bootMenu: true
    powerdownTimeout: 300
    cpuModel: host
    maximumCpus: 4
    currentCpus: 2
    cpuTopology: {sockets: 1, diesPerSocket: 1, coresPerDie: 2, threadsPerCore: 2}
    maximumRam: 8Gi
    currentRam: 4294967296
    rtcBase: localtime
    rtcClock: host
    networks:
      - tap: {device: virtio-net, bridge: br0, mac: "52:54:00:12:34:56"}
      - user: {device: e1000, net: 10.0.2.0/24, mac: "52:54:00:12:34:57"}
    disks:
      - volumeClaimTemplate:
          apiVersion: v1
          kind: PersistentVolumeClaim
          metadata:
            name: system
            namespace: default
            labels: {backup: daily}
            annotations: {note: root disk}
          spec:
            accessModes: [ReadWriteOnce]
            selector:
              matchLabels: {disk: full}
              matchExpressions:
                - {key: speed, operator: In, values: [fast]}
            resources:
              requests: {storage: 40Gi}
              limits: {storage: 50Gi}
            storageClassName: local
            volumeMode: Block
            volumeName: pv-full
            dataSource: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: golden}
            dataSourceRef: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: golden, namespace: images}
            volumeAttributesClassName: gold
        bootindex: 0
        source:
          url: https://example.com/debian-13-genericcloud-amd64.qcow2
          checksum: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789ABCDEF
      - volumeClaimTemplate:
          metadata: {name: tools}
          spec:
            resources:
              requests: {storage: 1Gi}
        source: {file: disks/tools.raw.xz}
      - volumeClaimTemplate:
          metadata: {name: fedora}
          spec:
            volumeMode: Filesystem
            resources:
              requests: {storage: 8Gi}
        source: {containerDisk: "quay.io/containerdisks/fedora:41", checksum: "sha512:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"}
      - cdrom: {image: "https://example.com/debian.iso"}
        bootindex: 1
      - cdrom: {image: ""}
    display:
      outputs: 2
      loggedInUser: admin
      spice:
        port: 5910
        server: vm.example.com
        proxyUrl: http://proxy.example.com:3128
        usbRedirects: 3
        generateSecret: false
        streamingVideo: filter
        ticket: secret
    serialConsole:
      podLog: true
`

// sourceImageVM names its image the other way; with fullVM it covers all.
const sourceImageVM = `
apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  name: source-image
spec:
  image:
    source: ghcr.io/mnlipp/org.jdrupes.vmoperator.runner.qemu-arch:latest
    pullPolicy: Always
  vm:
    maximumCpus: 1
    networks:
      - pod:
          device: virtio-net
          net: 10.1.0.0/24
          mac: "52:54:00:12:34:58"
          ports: [{port: 22, protocol: TCP}, {port: 53, protocol: UDP}]
      - user: {}
`

// fullStatus sets every status field.
const fullStatus = `
observedGeneration: 1
conditions:
  - type: Running
    status: "False"
    observedGeneration: 1
    lastTransitionTime: "2025-01-02T03:04:05Z"
    reason: Stopped
    message: The VM is stopped.
runnerVersion: "1.0.0"
cpus: 2
ram: 4Gi
printableStatus: Stopped
targetCpus: 2
targetRam: 4Gi
accelerator: kvm
node: node-1
consoleClient: 192.168.1.20
consoleUser: admin
loggedInUser: admin
displayPasswordSerial: 3
osinfo: {id: debian, version-id: "12"}
hostname: desk
interfaces: [{name: eth0, mac: "52:54:00:12:34:56", ipAddresses: [10.0.2.15/24]}]
guestAgentVersion: "7.2.15"
assignment: {pool: test-pool, user: admin, lastUsed: "2025-01-02T03:04:05Z"}
`

// minimalVM is valid; invalid cases change one thing in it.
const minimalVM = `
apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  name: minimal
spec:
  vm:
    maximumCpus: 1
`

// invalidVMs are what the schema must reject, with a part of the error.
var invalidVMs = []struct {
	name string
	// patch is merged into minimalVM's spec.
	patch string
	want  string
}{
	{"unknown state", `vm: {state: Paused}`, `spec.vm.state: Unsupported value: "Paused"`},
	{"unknown firmware", `vm: {firmware: efi}`, `spec.vm.firmware: Unsupported value: "efi"`},
	{"no CPU", `vm: {maximumCpus: 0}`, `spec.vm.maximumCpus: Invalid value: 0: spec.vm.maximumCpus in body should be greater than or equal to 1`},
	{"negative powerdownTimeout", `vm: {powerdownTimeout: -1}`, `spec.vm.powerdownTimeout: Invalid value: -1: spec.vm.powerdownTimeout in body should be greater than or equal to 0`},
	{"bad RAM quantity", `vm: {maximumRam: 4Gx}`, `spec.vm.maximumRam: Invalid value: "4Gx": spec.vm.maximumRam in body should match`},
	{"disk with PVC and cdrom", `vm: {disks: [{cdrom: {image: a.iso}, volumeClaimTemplate: {spec: {}}}]}`, `"spec.vm.disks[0]" must validate one and only one schema (oneOf). Found 2 valid alternatives`},
	{"source out of the repository", `vm: {disks: [{volumeClaimTemplate: {spec: {}}, source: {file: a/../../b}}]}`, `spec.vm.disks[0].source.file: Invalid value: "a/../../b": spec.vm.disks[0].source.file in body should match`},
	{"source of another scheme", `vm: {disks: [{volumeClaimTemplate: {spec: {}}, source: {url: "ftp://h/a"}}]}`, `spec.vm.disks[0].source.url: Invalid value: "ftp://h/a": spec.vm.disks[0].source.url in body should match`},
	{"source with an md5 checksum", `vm: {disks: [{volumeClaimTemplate: {spec: {}}, source: {url: "http://h/a", checksum: "md5:d41d8cd98f00b204e9800998ecf8427e"}}]}`, `spec.vm.disks[0].source.checksum: Invalid value: "md5:d41d8cd98f00b204e9800998ecf8427e": spec.vm.disks[0].source.checksum in body should match`},
	{"disk with neither", `vm: {disks: [{bootindex: 1}]}`, `"spec.vm.disks[0]" must validate one and only one schema (oneOf). Found none valid`},
	{"network with tap and user", `vm: {networks: [{tap: {}, user: {}}]}`, `"spec.vm.networks[0]" must validate one and only one schema (oneOf). Found 2 valid alternatives`},
	{"spice port out of range", `vm: {display: {spice: {port: 70000}}}`, `spec.vm.display.spice.port: Invalid value: 70000: spec.vm.display.spice.port in body should be less than or equal to 65535`},
	{"missing spec.vm", `vm: null`, `spec.vm: Required value`},
	{"bad MAC", `vm: {networks: [{tap: {mac: "52:54:00:12:34"}}]}`, `spec.vm.networks[0].tap.mac: Invalid value: "52:54:00:12:34"`},
}

// celInvalidVMs break the schema's CEL rules, which only a server runs.
var celInvalidVMs = []struct{ name, patch, want string }{
	{"source on a cdrom", `vm: {disks: [{cdrom: {image: a.iso}, source: {url: "http://h/a.qcow2"}}]}`, `spec.vm.disks[0]: Invalid value: only a volumeClaimTemplate disk has a source`},
	{"source with url and file", `vm: {disks: [{volumeClaimTemplate: {spec: {}}, source: {url: "http://h/a", file: a}}]}`, `spec.vm.disks[0].source: Invalid value: must have exactly one of url, file or containerDisk`},
	{"source with url and containerDisk", `vm: {disks: [{volumeClaimTemplate: {spec: {}}, source: {url: "http://h/a", containerDisk: "quay.io/a:b"}}]}`, `spec.vm.disks[0].source: Invalid value: must have exactly one of url, file or containerDisk`},
	{"containerDisk not an image reference", `vm: {disks: [{volumeClaimTemplate: {spec: {}}, source: {containerDisk: "Quay.io/a b"}}]}`, `spec.vm.disks[0].source.containerDisk: Invalid value: "Quay.io/a b": spec.vm.disks[0].source.containerDisk in body should match`},
	{"more current than maximum CPUs", `vm: {maximumCpus: 2, currentCpus: 3}`, `spec.vm.currentCpus: Invalid value: must not exceed maximumCpus`},
	{"more current than maximum RAM", `vm: {maximumRam: 1Gi, currentRam: 2G}`, `spec.vm.currentRam: Invalid value: must not exceed maximumRam`},
	{"more current than the default maximum RAM", `vm: {currentRam: 2Gi}`, `spec.vm.currentRam: Invalid value: must not exceed maximumRam (1Gi when absent)`},
	{"RAM below 1Mi", `vm: {maximumRam: 1Ki}`, `spec.vm.maximumRam: Invalid value: must be at least 1Mi`},
	{"topology beyond maximumCpus", `vm: {maximumCpus: 4, cpuTopology: {sockets: 1, coresPerDie: 2, threadsPerCore: 1}}`, `spec.vm.cpuTopology: Invalid value: the topology's CPUs do not fit maximumCpus`},
	{"duplicate MACs", `vm: {networks: [{user: {mac: "52:54:00:00:00:01"}}, {tap: {mac: "52:54:00:00:00:01"}}]}`, `spec.vm.networks: Invalid value: two networks have the same mac`},
	{"IPv6 user network", `vm: {networks: [{user: {net: "fd00::/64"}}]}`, `must be an IPv4 network in CIDR notation with a prefix of 4 to 27 bits`},
	{"two pod networks", `vm: {networks: [{pod: {}}, {pod: {}}]}`, `spec.vm.networks: Invalid value: only one network may be the pod's`},
	{"pod and tap networks", `vm: {networks: [{pod: {}}, {tap: {}}]}`, `spec.vm.networks: Invalid value: a pod network cannot be combined with a tap network`},
	{"the SPICE port passed to the guest", `vm: {networks: [{pod: {ports: [{port: 5900}]}}]}`, `spec.vm.networks: Invalid value: a pod network's ports must not include the pod's own SPICE port`},
	{"a pod port twice", `vm: {networks: [{pod: {ports: [{port: 22}, {port: 22, protocol: TCP}]}}]}`, `spec.vm.networks[0].pod.ports: Invalid value: each port and protocol at most once`},
	{"image source and repository", `image: {source: a/b:c, repository: a}`, `spec.image: Invalid value: give either source or repository/path/version, not both`},
}

func TestCRDOnAPIServer(t *testing.T) {
	c := testcluster.New(t)
	ctx := t.Context()
	require.NoError(t, c.InstallCRD(ctx, vmv1.CRDManifest))
	client, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	vms := client.Resource(vmv1.GroupVersionResource).Namespace("default")

	t.Run("full VMs are stored unpruned", func(t *testing.T) {
		union := map[string]any{}
		for _, doc := range []string{fullVM, sourceImageVM} {
			in := decodeYAML(t, doc)
			mergeUnion(union, in.Object["spec"].(map[string]any))
			// The Go types must read it too, strictly.
			var typed vmv1.VirtualMachine
			strict, err := sigsjson.UnmarshalStrict(mustJSON(t, in), &typed)
			require.NoError(t, err)
			require.Empty(t, strict)

			// Strict field validation turns pruning into an error that
			// names the field; the comparison catches the rest.
			_, err = vms.Create(ctx, in, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
			require.NoError(t, err)
			got, err := vms.Get(ctx, in.GetName(), metav1.GetOptions{})
			require.NoError(t, err)
			require.Equal(t, in.Object["spec"], got.Object["spec"])
		}
		requireAllProperties(t, "spec", union)
	})

	t.Run("full status is stored unpruned", func(t *testing.T) {
		vm, err := vms.Get(ctx, "full", metav1.GetOptions{})
		require.NoError(t, err)
		status := decodeYAML(t, fullStatus).Object
		requireAllProperties(t, "status", status)
		vm.Object["status"] = status
		_, err = vms.UpdateStatus(ctx, vm, metav1.UpdateOptions{FieldValidation: metav1.FieldValidationStrict})
		require.NoError(t, err)
		got, err := vms.Get(ctx, "full", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, status, got.Object["status"])
	})

	t.Run("invalid VMs are rejected", func(t *testing.T) {
		for _, tc := range append(invalidVMs, celInvalidVMs...) {
			t.Run(tc.name, func(t *testing.T) {
				vm := badVM(t, tc.patch)
				_, err := vms.Create(ctx, vm, metav1.CreateOptions{})
				if err == nil {
					_ = vms.Delete(ctx, vm.GetName(), metav1.DeleteOptions{})
				}
				require.Error(t, err)
				require.Contains(t, err.Error(), tc.want)
			})
		}
	})

	t.Run("the minimal VM is accepted", func(t *testing.T) {
		_, err := vms.Create(ctx, badVM(t, `{}`), metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
		require.NoError(t, err)
	})

	// Uses the VM and status created above.
	t.Run("kubectl shows the printer columns", func(t *testing.T) {
		out, err := c.Kubectl(ctx, "get", "vms", "full").CombinedOutput()
		require.NoError(t, err, "%s", out)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		require.Len(t, lines, 2, "%s", out)
		require.Equal(t, []string{"NAME", "STATE", "STATUS", "CPUS", "RAM", "NODE", "AGE"}, strings.Fields(lines[0]))
		row := strings.Fields(lines[1])
		require.Len(t, row, 7, "%s", out)
		require.Equal(t, []string{"full", "Stopped", "Stopped", "2", "4Gi", "node-1"}, row[:6])

		// The short name works too.
		out, err = c.Kubectl(ctx, "get", "vm", "full", "-o", "name").CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, "virtualmachine.vmoperator.jdrupes.org/full", strings.TrimSpace(string(out)))
	})
}

// badVM returns minimalVM with patch merged into its spec; a null in the
// patch removes a key.
func badVM(t *testing.T, patch string) *unstructured.Unstructured {
	t.Helper()
	vm := decodeYAML(t, minimalVM)
	var p map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(patch), &p))
	spec := vm.Object["spec"].(map[string]any)
	mergeInto(spec, p)
	return vm
}

func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		switch v := v.(type) {
		case nil:
			delete(dst, k)
		case map[string]any:
			if d, ok := dst[k].(map[string]any); ok {
				mergeInto(d, v)
				continue
			}
			dst[k] = v
		default:
			dst[k] = v
		}
	}
}

// decodeYAML decodes as the API machinery does (integers as int64), so
// that objects compare equal to those read back from the server.
func decodeYAML(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, utiljson.Unmarshal(j, &m))
	return &unstructured.Unstructured{Object: m}
}

func mustJSON(t *testing.T, u *unstructured.Unstructured) []byte {
	t.Helper()
	b, err := u.MarshalJSON()
	require.NoError(t, err)
	return b
}

// requireAllProperties fails unless value sets every property that the
// schema defines below path (maps and free-form values count as set when
// present), so that the full examples stay full as fields are added.
func requireAllProperties(t *testing.T, path string, value any) {
	t.Helper()
	s := rootSchema(t, loadCRD(t)).Properties[path]
	var missing []string
	var walk func(path string, s *apiextensionsv1.JSONSchemaProps, v any)
	walk = func(path string, s *apiextensionsv1.JSONSchemaProps, v any) {
		switch {
		case len(s.Properties) > 0:
			m, _ := v.(map[string]any)
			for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
				p := s.Properties[name]
				sub, ok := m[name]
				if p.MaxItems != nil && *p.MaxItems == 0 {
					continue // a list that must stay empty
				}
				if !ok {
					missing = append(missing, path+"."+name)
					continue
				}
				walk(path+"."+name, &p, sub)
			}
		case s.Items != nil && s.Items.Schema != nil:
			// Each item may set part; together they must set all.
			items, _ := v.([]any)
			merged := map[string]any{}
			for _, it := range items {
				if m, ok := it.(map[string]any); ok {
					mergeUnion(merged, m)
				}
			}
			if len(items) == 0 {
				missing = append(missing, path+"[]")
			} else if len(s.Items.Schema.Properties) > 0 {
				walk(path+"[]", s.Items.Schema, merged)
			}
		}
	}
	walk(path, &s, value)
	require.Empty(t, missing, "the example leaves these unset")
}

// mergeUnion adds src's keys to dst, recursively for objects and lists of
// objects, so that a union of examples can be checked for coverage.
func mergeUnion(dst, src map[string]any) {
	for k, v := range src {
		switch v := v.(type) {
		case map[string]any:
			d, ok := dst[k].(map[string]any)
			if !ok {
				d = map[string]any{}
				dst[k] = d
			}
			mergeUnion(d, v)
		case []any:
			d, _ := dst[k].([]any)
			dst[k] = append(d, v...)
		default:
			dst[k] = v
		}
	}
}
