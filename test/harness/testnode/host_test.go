package testnode

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRuleArgs(t *testing.T) {
	require.Equal(t,
		[]string{"-A", "INPUT", "-m", "comment", "--comment", `kubernetes "health" check`, "-j", "KUBE-NODEPORTS"},
		ruleArgs(`-A INPUT -m comment --comment "kubernetes \"health\" check" -j KUBE-NODEPORTS`))
	require.Equal(t,
		[]string{"-A", "FORWARD", "-s", "10.99.0.0/24", "!", "-d", "10.99.0.0/24", "-m", "comment", "--comment", "vmop-testnode", "-j", "DROP"},
		ruleArgs(`-A FORWARD -s 10.99.0.0/24 ! -d 10.99.0.0/24 -m comment --comment vmop-testnode -j DROP`))
}
