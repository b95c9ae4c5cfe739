package kubecontroller

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/flowlb/flowlb/internal/kube/kubelb"
	"github.com/flowlb/flowlb/internal/server/apitest"
	"github.com/flowlb/flowlb/internal/shared/testutil"
)

// TestStages: a Service created while the controller runs has its
// stages (event, picked, sent, ACTIVE seen) in order, served as JSON and
// counted in the histograms; a deleted Service's are dropped.
func TestStages(t *testing.T) {
	api := apitest.New(t)
	o := &kubelb.Octavia{Client: api.Client, Poll: 5 * time.Millisecond}
	opts := kubelb.Options{Cluster: "lab", ClusterIPSubnet: api.ClusterSubnet, ExternalSubnet: api.ExternalSubnet}
	client := fake.NewClientset()
	h := &harness{t: t, api: api, o: o, client: client}
	c := New(client, o, &kubelb.Neutron{Client: o.Client}, opts, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- c.Run(t.Context(), 2) }()
	testutil.Eventually(t, within, "the controller started", func() (bool, string) { return c.queue.Len() == 0 && c.factory != nil, "" })
	before := time.Now()
	if _, err := client.DiscoveryV1().EndpointSlices("default").Create(t.Context(), epSlice("web", "198.18.17.2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Services("default").Create(t.Context(), svc("web", corev1.ServiceTypeClusterIP, "198.19.64.10"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "web's LB", h.memberCount("web", 1))
	read := func() map[string]Stages {
		rec := httptest.NewRecorder()
		c.StagesHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/stages", nil))
		var out map[string]Stages
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%v: %s", err, rec.Body)
		}
		return out
	}
	testutil.Eventually(t, within, "web's stages to ACTIVE", func() (bool, string) {
		s := read()["default/web"]
		return !s.Active.IsZero(), fmt.Sprintf("%+v", s)
	})
	s := read()["default/web"]
	if s.Event.Before(before) || s.Picked.Before(s.Event) || s.Sent.Before(s.Picked) || s.Active.Before(s.Sent) {
		t.Errorf("stages out of order (created after %s): %+v", before, s)
	}
	for _, st := range []string{"queue", "calls", "active"} {
		var m dto.Metric
		if err := c.m.stage.WithLabelValues(st).(prometheus.Metric).Write(&m); err != nil {
			t.Fatal(err)
		}
		if n := m.GetHistogram().GetSampleCount(); n != 1 {
			t.Errorf("stage %s: %d samples, want 1", st, n)
		}
	}
	if err := client.CoreV1().Services("default").Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, within, "web's stages dropped", func() (bool, string) {
		_, ok := read()["default/web"]
		return !ok, ""
	})
}
