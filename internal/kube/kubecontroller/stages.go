package kubecontroller

import (
	"encoding/json"
	"net/http"
	"time"
)

// Stages are the times of a Service's last applied change on its way
// through the controller, for finding where a slow Service's time went:
// the informer event that brought the change (the oldest not yet
// applied), when a worker took the reconcile that applied it (a new
// Service's wait for its first EndpointSlice is before it), when the API
// had answered that reconcile's calls, and when the controller saw the
// load balancer ACTIVE (every node's agent had programmed it).
type Stages struct {
	Event  time.Time `json:"event"`
	Picked time.Time `json:"picked"`
	Sent   time.Time `json:"sent"`
	Active time.Time `json:"active,omitzero"`
}

// picked notes that a worker took key's reconcile now, for the change
// that arrived at event (zero when the key was queued by the
// controller itself).
func (c *Controller) picked(key string, event time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.picks[key] = Stages{Event: event, Picked: time.Now()}
}

// unpicked ends key's reconcile.
func (c *Controller) unpicked(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.picks, key)
}

// sent notes that key's reconcile had its calls answered now.
func (c *Controller) sent(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.picks[key]
	s.Sent = time.Now()
	c.stages[key] = s
}

// activeSeen notes that key's load balancer was seen ACTIVE now, after
// the change sent: the end of its stages, which the histograms count.
func (c *Controller) activeSeen(key string) {
	c.mu.Lock()
	s, ok := c.stages[key]
	if !ok || s.Sent.IsZero() || !s.Active.IsZero() {
		c.mu.Unlock()
		return
	}
	s.Active = time.Now()
	c.stages[key] = s
	c.mu.Unlock()
	if !s.Event.IsZero() {
		c.m.stage.WithLabelValues("queue").Observe(s.Picked.Sub(s.Event).Seconds())
	}
	c.m.stage.WithLabelValues("calls").Observe(s.Sent.Sub(s.Picked).Seconds())
	c.m.stage.WithLabelValues("active").Observe(s.Active.Sub(s.Sent).Seconds())
}

// StagesHandler answers every Service's Stages as JSON, by
// namespace/name.
func (c *Controller) StagesHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c.mu.Lock()
		b, err := json.Marshal(c.stages)
		c.mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
}
