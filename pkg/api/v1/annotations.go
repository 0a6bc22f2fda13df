package v1

import (
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// AnnotationResetCounter on a VirtualMachine holds its reset counter, a
// non-negative integer: each increase makes the runner reset the guest
// (QMP system_reset, like the reset button). The runner gets the value in
// its config's resetCounter, a live change.
//
// It is an annotation rather than a spec field because VM-Operator's CRD
// has no such field (its operator keeps the count in memory): a spec field
// would be unknown to that CRD (dropped or refused by the API server),
// while a manifest written for VM-Operator must stay valid and mean the
// same with vmop. Annotations are free for both.
const AnnotationResetCounter = Group + "/reset-counter"

// ResetCounter returns the value of the AnnotationResetCounter annotation,
// 0 when there is none, and an error with its field path when the value is
// not a non-negative integer.
func (vm *VirtualMachine) ResetCounter() (int64, *field.Error) {
	s, ok := vm.Annotations[AnnotationResetCounter]
	if !ok {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, field.Invalid(field.NewPath("metadata", "annotations").Key(AnnotationResetCounter), s, "must be a non-negative integer")
	}
	return n, nil
}

// AnnotationDisplayWithoutPassword set to "true" on a VirtualMachine
// opts out of the locked display: qemu's SPICE server then runs without a
// password, open to whoever reaches the pod's SPICE port. Without it the
// display is locked until a password is set (the console's one-time one,
// or the display Secret's).
//
// An annotation, as AnnotationResetCounter, so that VM-Operator's CRD
// accepts the VM unchanged.
const AnnotationDisplayWithoutPassword = Group + "/display-without-password"

// DisplayWithoutPassword tells whether the VM opts out of the locked
// display; an error with its field path when the annotation's value is not
// "true" or "false".
func (vm *VirtualMachine) DisplayWithoutPassword() (bool, *field.Error) {
	s, ok := vm.Annotations[AnnotationDisplayWithoutPassword]
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil || (s != "true" && s != "false") {
		return false, field.Invalid(field.NewPath("metadata", "annotations").Key(AnnotationDisplayWithoutPassword), s, `must be "true" or "false"`)
	}
	return b, nil
}

// AnnotationDrain on a VirtualMachine says what a drain of its node does
// to it. DrainWait makes the drain wait for a person, who stops the VM;
// without it (or with "") the drain shuts the VM down.
//
// An annotation, as AnnotationResetCounter, so that VM-Operator's CRD
// accepts the VM unchanged.
const AnnotationDrain = Group + "/drain"

// DrainWait is the value of AnnotationDrain that makes a drain wait.
const DrainWait = "wait"

// DrainWaits tells whether a drain of the VM's node waits for a person; an
// error with its field path when the annotation's value is neither
// DrainWait nor "".
func (vm *VirtualMachine) DrainWaits() (bool, *field.Error) {
	switch s := vm.Annotations[AnnotationDrain]; s {
	case "":
		return false, nil
	case DrainWait:
		return true, nil
	default:
		return false, field.Invalid(field.NewPath("metadata", "annotations").Key(AnnotationDrain), s, `must be "`+DrainWait+`" or ""`)
	}
}
