package list_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/list"
)

// BenchmarkListAll is the plugin's own share of "kubectl vm list -A" over
// 10,000 stopped VMs in operator mode (issue 39 asks for the whole in
// under 2 s): an API server that answers from memory, as a real one does
// from its watch cache, sends the VMs' printer columns (a Table, each row
// with the VM's metadata) or, without those columns, the whole VMs
// (testdata/bench/vm.json: a stopped VM as listed once the operator
// reported on it, with managed fields, 2.3 KB; BenchmarkScale's are 2.8),
// and no StatefulSets in GitOps mode; the plugin reads, decodes and
// prints them.
func BenchmarkListAll(b *testing.B) {
	const n = 10000
	item, err := os.ReadFile("testdata/bench/vm.json")
	if err != nil {
		b.Fatal(err)
	}
	var vm struct {
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(item, &vm); err != nil {
		b.Fatal(err)
	}
	// list builds the VirtualMachineList or Table of n VMs from each's
	// part.
	list := func(head string, part []byte) []byte {
		var out bytes.Buffer
		out.WriteString(head)
		for i := range n {
			if i > 0 {
				out.WriteByte(',')
			}
			r := strings.NewReplacer(`"NAME"`, fmt.Sprintf(`"vm-%05d"`, i), `"NAMESPACE"`, fmt.Sprintf(`"scale-%03d"`, i%100))
			out.WriteString(r.Replace(strings.TrimSpace(string(part))))
		}
		out.WriteString("]}")
		return out.Bytes()
	}
	whole := list(`{"apiVersion":"vmoperator.jdrupes.org/v1","kind":"VirtualMachineList","metadata":{"resourceVersion":"1"},"items":[`, item)
	columns := `[{"name":"Name","type":"string"},{"name":"State","type":"string"},{"name":"Status","type":"string"},` +
		`{"name":"CPUs","type":"integer"},{"name":"RAM","type":"string"},{"name":"Node","type":"string"},` +
		`{"name":"IP","type":"string","priority":1},{"name":"Console","type":"string","priority":1},` +
		`{"name":"Target CPUs","type":"integer","priority":1},{"name":"Target RAM","type":"string","priority":1},{"name":"Age","type":"date"}]`
	row := `{"cells":["NAME",null,"Stopped",null,null,null,null,null,2,"1Gi","2026-11-30T02:10:00Z"],` +
		`"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":` + string(vm.Metadata) + `}}`
	table := list(`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"1"},"columnDefinitions":`+columns+`,"rows":[`, []byte(row))

	for _, bc := range []struct {
		name string
		// columns is whether the CRD has the printer columns list reads.
		columns bool
	}{{"columns", true}, {"whole VMs", false}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch r.URL.Path {
				case "/apis/vmoperator.jdrupes.org/v1/vms":
					if bc.columns && strings.Contains(r.Header.Get("Accept"), "as=Table") {
						_, _ = w.Write(table)
						return
					}
					_, _ = w.Write(whole)
				case "/apis/apps/v1/statefulsets":
					_, _ = io.WriteString(w, `{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadataList","metadata":{"resourceVersion":"1"},"items":[]}`)
				default:
					http.Error(w, "not served: "+r.URL.Path, http.StatusNotFound)
				}
			}))
			defer srv.Close()
			listAll(b, srv.URL, n)
		})
	}
}

// listAll runs "kubectl vm list -A" against server, which has n VMs.
func listAll(b *testing.B, server string, n int) {
	now := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	for b.Loop() {
		flags := genericclioptions.NewConfigFlags(false)
		kubeconfig := os.DevNull
		flags.KubeConfig, flags.APIServer = &kubeconfig, &server
		var out, errOut bytes.Buffer
		cmd := list.NewCmdWithClock("kubectl vm", flags, genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}, func() time.Time { return now })
		cmd.SetArgs([]string{"-A"})
		if err := cmd.Execute(); err != nil {
			b.Fatalf("%v: %s", err, errOut.String())
		}
		if rows := bytes.Count(out.Bytes(), []byte("\n")) - 1; rows != n {
			b.Fatalf("%d rows, want %d: %s", rows, n, errOut.String())
		}
		if !bytes.Contains(out.Bytes(), []byte("scale-099   vm-09999   Stopped   Stopped   (2)    (1Gi)")) {
			b.Fatalf("the last VM's row is wrong:\n%s", out.Bytes()[out.Len()-200:])
		}
	}
}
