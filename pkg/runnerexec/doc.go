// Package runnerexec is what other binaries run in a VM's runner
// container with exec, as vm-runner and they agree on it: the command
// lines of vm-runner serial and vm-runner disk receive, and how their
// output reads. kubectl vm links it instead of the runner's packages; it
// imports nothing of vmop's.
package runnerexec
