package csidriver

import (
	"context"
	"fmt"
	"sync"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registration answers the kubelet's plugin watcher, which finds its
// socket in <kubelet root>/plugins_registry, as node-driver-registrar
// would: the kubelet then reaches the driver at endpoint, asks it for the
// node's ID and lists it in the node's CSINode.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	endpoint string

	mu sync.Mutex
	// err is what the kubelet said of its last registration, if it
	// failed.
	err error
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              DriverName,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = nil
	if !s.GetPluginRegistered() {
		r.err = fmt.Errorf("the kubelet did not register the driver: %s", s.GetError())
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (r *registration) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
