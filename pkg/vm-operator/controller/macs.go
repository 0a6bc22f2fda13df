package controller

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	v1 "github.com/vmop/vmop/pkg/api/v1"
)

// macRecheck is how soon a VM refused for its MAC is checked again: the
// older VM's change or deletion does not enqueue it.
const macRecheck = 30 * time.Second

// macConflict tells whether another VM of vm's namespace, older than vm
// (then by name), has a tap NIC with a MAC that one of vm's tap NICs has:
// on a bridge of a node two such guests would take each other's traffic.
// Only tap NICs share a link: a pod or user network's NIC is alone behind
// its pod, so any MAC serves there.
func macConflict(vms cache.GenericLister, vm *v1.VirtualMachine) (string, bool) {
	mine := map[string]int{}
	for i, n := range vm.Spec.VM.Networks {
		if n.Tap != nil && n.Tap.MAC != "" {
			mine[strings.ToLower(n.Tap.MAC)] = i
		}
	}
	if len(mine) == 0 {
		return "", false
	}
	objs, err := vms.ByNamespace(vm.Namespace).List(labels.Everything())
	if err != nil {
		return "", false
	}
	for _, obj := range objs {
		other, ok := obj.(metav1.Object)
		if !ok || other.GetName() == vm.Name || !older(other, vm) {
			continue
		}
		for _, mac := range tapMACs(obj) {
			if i, dup := mine[mac]; dup {
				return fmt.Sprintf("%s: spec.vm.networks[%d].tap.mac: %s is also a tap NIC's of VM %s, which is older: two guests with one MAC on a bridge take each other's traffic; give this one another MAC",
					vm.Name, i, mac, other.GetName()), true
			}
		}
	}
	return "", false
}

// older orders VMs by creation, then name: the older keeps its MAC.
func older(other metav1.Object, vm *v1.VirtualMachine) bool {
	a, b := other.GetCreationTimestamp(), vm.CreationTimestamp
	if !a.Equal(&b) {
		return a.Before(&b)
	}
	return other.GetName() < vm.Name
}

// tapMACs are the MACs of a cached VM's tap NICs, lower case; of one that
// did not decode (which still keeps its MACs from newer VMs), as far as
// they can be read.
func tapMACs(obj any) []string {
	var macs []string
	if vm, ok := obj.(*v1.VirtualMachine); ok {
		for _, n := range vm.Spec.VM.Networks {
			if n.Tap != nil && n.Tap.MAC != "" {
				macs = append(macs, strings.ToLower(n.Tap.MAC))
			}
		}
		return macs
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	nets, _, _ := unstructured.NestedSlice(u.Object, "spec", "vm", "networks")
	for _, n := range nets {
		m, ok := n.(map[string]any)
		if !ok {
			continue
		}
		if mac, _, _ := unstructured.NestedString(m, "tap", "mac"); mac != "" {
			macs = append(macs, strings.ToLower(mac))
		}
	}
	return macs
}
