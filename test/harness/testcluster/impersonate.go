package testcluster

import (
	"net/http"

	"github.com/vmop/vmop/pkg/kubeapi"
)

// Impersonate is cfg acting as user in groups, as that user's own
// credentials would: the API server authorizes the requests as the user.
func Impersonate(cfg *kubeapi.Config, user string, groups ...string) *kubeapi.Config {
	return WrapTransport(cfg, func(req *http.Request) {
		req.Header.Set("Impersonate-User", user)
		for _, g := range groups {
			req.Header.Add("Impersonate-Group", g)
		}
	})
}

// WrapTransport is a copy of cfg whose requests see f before they are
// sent, after any wrapping cfg had.
func WrapTransport(cfg *kubeapi.Config, f func(*http.Request)) *kubeapi.Config {
	c := *cfg
	inner := cfg.WrapTransport
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if inner != nil {
			rt = inner(rt)
		}
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			req = req.Clone(req.Context())
			f(req)
			return rt.RoundTrip(req)
		})
	}
	return &c
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
