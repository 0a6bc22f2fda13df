package testnode

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ClusterDomain is the node's cluster domain: a pod finds a Service as
// <service>.<namespace>.svc.cluster.local, or by its bare name in its own
// namespace, as on a cluster with CoreDNS (Argo CD's and Flux's
// components find each other so).
const ClusterDomain = "cluster.local"

// clusterDNS answers pods' queries for Services at IP:53, as a cluster's
// DNS (CoreDNS's kubernetes plugin) does for ClusterIP Services. Every
// other name is NXDOMAIN: nothing is forwarded, so no pod resolves a name
// of the world.
type clusterDNS struct {
	client  kubernetes.Interface
	servers []*dns.Server
}

// startClusterDNS serves on UDP and TCP; the kubelet gives pods IP as
// their name server (clusterDNS in its config).
func startClusterDNS(client kubernetes.Interface) (*clusterDNS, error) {
	d := &clusterDNS{client: client}
	for _, network := range []string{"udp", "tcp"} {
		started := make(chan error, 1)
		s := &dns.Server{Addr: net.JoinHostPort(IP, "53"), Net: network, Handler: d,
			NotifyStartedFunc: func() { started <- nil }}
		go func() { started <- s.ListenAndServe() }()
		if err := <-started; err != nil {
			d.stop()
			return nil, err
		}
		d.servers = append(d.servers, s)
	}
	return d, nil
}

func (d *clusterDNS) stop() {
	for _, s := range d.servers {
		_ = s.Shutdown()
	}
}

func (d *clusterDNS) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if len(req.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	ip, err := d.serviceIP(q.Name)
	switch {
	case err != nil:
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA:
		m.Answer = []dns.RR{&dns.A{
			Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
			A:   ip,
		}}
	}
	// Other types of a Service's name: no data, the name exists.
	_ = w.WriteMsg(m)
}

var errNoService = errors.New("no such Service")

// dnsLookupTimeout bounds a query's API call: resolvers retry after 5 s.
const dnsLookupTimeout = 2 * time.Second

// serviceIP is the ClusterIP of the Service that name (fully qualified)
// stands for.
func (d *clusterDNS) serviceIP(name string) (net.IP, error) {
	rest, ok := strings.CutSuffix(strings.ToLower(name), ".svc."+ClusterDomain+".")
	if !ok {
		return nil, errNoService
	}
	svc, ns, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(ns, ".") {
		return nil, errNoService
	}
	ctx, cancel := context.WithTimeout(context.Background(), dnsLookupTimeout)
	defer cancel()
	s, err := d.client.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(s.Spec.ClusterIP).To4()
	if ip == nil {
		return nil, errNoService // headless or IPv6
	}
	return ip, nil
}
