package manifest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// sameAsJSON checks that ObjectToYAML writes what encoding/json followed
// by JSONToYAML writes.
func sameAsJSON(t *testing.T, obj any) {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	want, err := JSONToYAML(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ObjectToYAML(obj)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("ObjectToYAML differs from encoding/json (-json +reflect):\n%s", d)
	}
}

type embedded struct {
	Shared string `json:"shared"`
	Deep   string `json:"deep,omitempty"`
}

type tricky struct {
	embedded `json:",inline"`
	*corev1.LocalObjectReference
	Shared   string            `json:"shared"` // shallower than the embedded one: wins
	Skipped  string            `json:"-"`
	private  string            //nolint:unused // unexported: never written
	NoTag    int               //
	Float    float64           `json:"float"`
	Bytes    []byte            `json:"bytes"`
	NilSlice []string          `json:"nilSlice"`
	Empty    map[string]string `json:"empty"`
	Zero     metav1.Time       `json:"zero,omitzero"`
	ZeroPtr  *metav1.Time      `json:"zeroPtr,omitzero"`
	Any      any               `json:"any"`
	Nested   [][]int           `json:"nested"`
	Uint     uint16            `json:"uint,omitempty"`
}

func TestObjectToYAMLMatchesJSON(t *testing.T) {
	sameAsJSON(t, &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"z": "1", "a": "yes"}, CreationTimestamp: metav1.NewTime(time.Unix(1700000000, 0).UTC())},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{
					Name: "c", Command: []string{"sh", "-c", "echo 'a: b'\nexit 1\n"},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("3276Mi"),
					}},
					Ports:          []corev1.ContainerPort{{Name: "spice", ContainerPort: 5900}},
					LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http")}}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}}},
				}},
				SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(false)},
			}},
		},
	})
	sameAsJSON(t, &corev1.Secret{Data: map[string][]byte{"user-data": []byte("#cloud-config\n"), "empty": {}}})
	sameAsJSON(t, &tricky{
		embedded: embedded{Shared: "deep", Deep: "d"}, Shared: "top", Skipped: "x", private: "p", NoTag: 3,
		Float: 1.5e-7, Bytes: []byte{0, 1, 2}, Empty: map[string]string{}, Any: map[string]any{"k": []any{1.0, "2", nil, true}},
		Nested: [][]int{{1}, {}, nil},
	})
	sameAsJSON(t, &tricky{LocalObjectReference: &corev1.LocalObjectReference{Name: "ref"}, ZeroPtr: &metav1.Time{}})
	sameAsJSON(t, map[string]any{"b": nil, "a": []any{}, "c": map[string]any{}})
	sameAsJSON(t, []string{"y", "n", "1e3", "日本"})
	sameAsJSON(t, "top-level string")
}

func FuzzObjectToYAML(f *testing.F) {
	for _, s := range append(jsonSeeds, hostileJSON...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var v any
		if json.Unmarshal(in, &v) != nil {
			return
		}
		sameAsJSON(t, v)
	})
}
