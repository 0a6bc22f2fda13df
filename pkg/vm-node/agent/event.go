package agent

import (
	"context"
	"time"
)

// event is an events.k8s.io/v1 Event, as the agent creates it.
type event struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		GenerateName string `json:"generateName"`
		Namespace    string `json:"namespace"`
	} `json:"metadata"`
	EventTime           string    `json:"eventTime"`
	ReportingController string    `json:"reportingController"`
	ReportingInstance   string    `json:"reportingInstance"`
	Action              string    `json:"action"`
	Reason              string    `json:"reason"`
	Note                string    `json:"note"`
	Type                string    `json:"type"`
	Regarding           regarding `json:"regarding"`
}

type regarding struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
}

// warning is the last Warning event of a pod.
type warning struct {
	note string
	at   time.Time
}

// warnAgain is how long the same warning about a pod is not repeated: a
// refused pod may offer its socket again and again.
const warnAgain = 10 * time.Minute

// warn creates a Warning event about pod, unless it did the same within
// warnAgain.
func (a *Agent) warn(ctx context.Context, pod *Pod, reason, action, note string) error {
	now := time.Now()
	a.mu.Lock()
	last, ok := a.warned[pod.UID]
	if ok && last.note == note && now.Sub(last.at) < warnAgain {
		a.mu.Unlock()
		return nil
	}
	if a.pods[pod.UID] != nil {
		a.warned[pod.UID] = warning{note: note, at: now}
	}
	a.mu.Unlock()
	e := event{
		APIVersion: "events.k8s.io/v1", Kind: "Event",
		EventTime:           now.UTC().Format("2006-01-02T15:04:05.000000Z07:00"),
		ReportingController: "vm-node", ReportingInstance: a.instance,
		Action: action, Reason: reason, Note: note, Type: "Warning",
		Regarding: regarding{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
	}
	e.Metadata.GenerateName = pod.Name + "-"
	e.Metadata.Namespace = pod.Namespace
	return a.o.Create(ctx, "/apis/events.k8s.io/v1/namespaces/"+pod.Namespace+"/events", e)
}
