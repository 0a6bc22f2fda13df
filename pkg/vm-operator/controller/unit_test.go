package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
)

// These unit tests pin decisions that the integration tests (test/e2e)
// reach only through a running cluster.

func TestStatusComparisonIgnoresTimesAndOrder(t *testing.T) {
	a := opStatus{ObservedGeneration: 2, Node: "n", Conditions: []metav1.Condition{
		{Type: v1.ConditionRunning, Status: metav1.ConditionTrue, Reason: v1.ReasonRunning, LastTransitionTime: metav1.NewTime(time.Unix(1, 0))},
		{Type: v1.ConditionFailed, Status: metav1.ConditionFalse, Reason: v1.ReasonNoFailure},
	}}
	b := opStatus{ObservedGeneration: 2, Node: "n", Conditions: []metav1.Condition{
		{Type: v1.ConditionFailed, Status: metav1.ConditionFalse, Reason: v1.ReasonNoFailure, LastTransitionTime: metav1.NewTime(time.Unix(5, 0))},
		{Type: v1.ConditionRunning, Status: metav1.ConditionTrue, Reason: v1.ReasonRunning},
	}}
	require.True(t, same(a, b))
	b.Conditions[1].Message = "other"
	require.False(t, same(a, b), "a message is part of the status")
	b = a
	b.ObservedGeneration = 3
	require.False(t, same(a, b), "a new generation is written")
}

func TestWriteCache(t *testing.T) {
	w := newWriteCache()
	k := writeKey{kind: "ConfigMap", namespace: "ns", name: "vm"}
	require.False(t, w.covers(k, "h1", nil), "nothing written")

	w.remember(k, "h1", &metav1.ObjectMeta{ResourceVersion: "10", UID: "u1"})
	require.True(t, w.covers(k, "h1", nil), "written, not yet in the informer's cache")
	require.True(t, w.covers(k, "h1", &metav1.ObjectMeta{ResourceVersion: "9"}), "the cache is older than the write")
	require.False(t, w.covers(k, "h2", nil), "another hash must be written")

	// Once the cache shows the write (or something newer), it decides.
	require.False(t, w.covers(k, "h1", &metav1.ObjectMeta{ResourceVersion: "11"}))
	require.False(t, w.covers(k, "h1", nil), "the entry is gone")

	w.remember(k, "h1", &metav1.ObjectMeta{ResourceVersion: "20", UID: "u2"})
	w.forgetObject("u2") // deleted: write it again
	require.False(t, w.covers(k, "h1", nil))
}

func TestTrimKeepsWhatTheOperatorReads(t *testing.T) {
	repository := corev1.Volume{Name: render.VolumeImageRepository, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: render.ImageRepositoryClaim},
	}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Annotations:   map[string]string{render.AnnotationRestartHash: "r", corev1.LastAppliedConfigAnnotation: "{}"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}},
		},
		Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "runner"}}, Volumes: []corev1.Volume{
			{Name: render.VolumeConfig, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
			repository,
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	_, err := trim(pod)
	require.NoError(t, err)
	require.Equal(t, map[string]string{render.AnnotationRestartHash: "r"}, pod.Annotations)
	require.Nil(t, pod.ManagedFields)
	require.Equal(t, corev1.PodSpec{NodeName: "n", Volumes: []corev1.Volume{repository}}, pod.Spec, "the claims tell what a pod waits for")
	require.Equal(t, corev1.PodRunning, pod.Status.Phase)

	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{render.AnnotationHash: "h"}, UID: "u"},
		Spec:       appsv1.StatefulSetSpec{ServiceName: "vm"},
	}
	_, err = trim(sts)
	require.NoError(t, err)
	require.Equal(t, "h", sts.Annotations[render.AnnotationHash])
	require.Equal(t, appsv1.StatefulSetSpec{}, sts.Spec)
}
