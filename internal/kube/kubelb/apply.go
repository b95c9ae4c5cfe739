package kubelb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
)

// Octavia applies desired load balancers through an Octavia v2 API with
// the fewest calls: one fully populated create, then per-object updates,
// and one batch call for all of a pool's members. Each apply is three
// steps: Load reads what Octavia holds, Plan (pure) decides the calls,
// and an execution sends them.
type Octavia struct {
	Client *gophercloud.ServiceClient
	// Poll is the longest wait between two checks for ACTIVE (default
	// 100 ms; the first checks come sooner, as flowlb's changes take
	// milliseconds); Timeout how long it may take (default 2 minutes).
	Poll, Timeout time.Duration
	// Defer leaves the wait after a plan's last call to the caller: Sync
	// returns once the call is accepted, naming the load balancer in
	// Result.Pending, and Status reads how it is going. A controller so
	// keeps its workers for other Services while the agents program.
	Defer bool
}

// Result is the applied load balancer's primary VIP and the addresses
// of its additional VIPs.
type Result struct {
	VIPAddress, VIPPortID string
	AdditionalVIPs        []ActualVIP
	// Pending, with Octavia.Defer, is the load balancer whose last change
	// was not waited for ("" when the plan was empty or ended waiting).
	Pending string
	// ID is the load balancer's id; Pools the ids of the pools of the
	// desired listeners, by listener ("TCP/80"), as far as the API's
	// answers told them: what PlanMembers needs.
	ID    string
	Pools map[string]string
	// UpdatedAt, when the plan was empty, is the load balancer's
	// updated_at as read ACTIVE before its children were (Actual).
	UpdatedAt string
	// NameChecked: the plan created the load balancer and the API said
	// it refuses a create whose name is in use (ErrNameTaken), so that a
	// load balancer known not to exist may be created without a list by
	// name first (Sync with an empty Actual).
	NameChecked bool
}

// IngressIPs are the addresses of lb's external VIPs (VIP.External) once
// applied as r, in lb's order: what status.loadBalancer.ingress lists.
// An additional VIP is found by its subnet, which is one per VIP.
func (lb *LB) IngressIPs(r Result) []string {
	var out []string
	if lb.VIP.External && r.VIPAddress != "" {
		out = append(out, r.VIPAddress)
	}
	for _, v := range lb.AdditionalVIPs {
		if !v.External {
			continue
		}
		for _, a := range r.AdditionalVIPs {
			if a.SubnetID == v.SubnetID && a.IPAddress != "" {
				out = append(out, a.IPAddress)
				break
			}
		}
	}
	return out
}

// Apply makes Octavia hold want and returns the load balancer's primary
// VIP and the number of calls that changed something.
func (o *Octavia) Apply(ctx context.Context, want *LB) (vip Result, calls int, err error) {
	actual, err := o.Load(ctx, want)
	if err != nil {
		return Result{}, 0, err
	}
	return o.Sync(ctx, actual, want)
}

// Sync is Apply with what Octavia holds already loaded, for a caller that
// acts on it first. An empty actual creates the load balancer; where the
// API checks names (Result.NameChecked) that fails with ErrNameTaken if
// one of its name exists, which the caller then loads.
func (o *Octavia) Sync(ctx context.Context, actual *Actual, want *LB) (vip Result, calls int, err error) {
	e := o.execution()
	if err := e.run(ctx, Plan(actual, want)); err != nil {
		return Result{}, e.calls, err
	}
	pools := map[string]string{}
	if id, created := e.ids[RefLoadBalancer]; created {
		vip = e.vip
		vip.ID = id
		for _, l := range e.listeners {
			pools[l.key()] = l.DefaultPoolID
		}
	} else {
		vip = Result{ID: actual.LB.ID, VIPAddress: actual.LB.VIPAddress, VIPPortID: actual.LB.VIPPortID, AdditionalVIPs: actual.LB.AdditionalVIPs}
		if e.calls == 0 {
			vip.UpdatedAt = actual.UpdatedAt
		}
		for _, l := range actual.Listeners {
			pools[l.key()] = l.DefaultPoolID
		}
	}
	vip.Pools = map[string]string{}
	for _, l := range want.Listeners {
		id := pools[listenerKey(l)]
		if made, ok := e.ids[poolRef(l)]; ok {
			id = made
		}
		if id != "" {
			vip.Pools[listenerKey(l)] = id
		}
	}
	vip.Pending = e.pending
	vip.NameChecked = e.nameChecked
	return vip, e.calls, nil
}

// Send sends calls (a PlanMembers plan) as Sync sends a plan's: it
// returns the load balancer left to become ACTIVE with Defer, and the
// number of calls sent.
func (o *Octavia) Send(ctx context.Context, calls []Call) (pending string, n int, err error) {
	e := o.execution()
	err = e.run(ctx, calls)
	return e.pending, e.calls, err
}

// Delete removes a load balancer and everything under it.
func (o *Octavia) Delete(ctx context.Context, id string) error {
	return o.execution().run(ctx, []Call{deleteLB(id)})
}

// Find returns the load balancer named name, or nil.
func (o *Octavia) Find(ctx context.Context, name string) (*ActualLB, error) {
	var out struct {
		LBs []ActualLB `json:"loadbalancers"`
	}
	if err := o.get(ctx, o.url("loadbalancers")+"?name="+url.QueryEscape(name), &out); err != nil {
		return nil, err
	}
	if len(out.LBs) == 0 {
		return nil, nil
	}
	return &out.LBs[0], nil
}

// Owned lists the load balancers carrying every tag in tags, page after
// page: Octavia answers at most pagination_max_limit (1,000 by default,
// flowlb's too) per call, with a link to the next page.
func (o *Octavia) Owned(ctx context.Context, tags ...string) ([]ActualLB, error) {
	return listAll[ActualLB](ctx, o, o.url("loadbalancers"), "loadbalancers", url.Values{"tags": {strings.Join(tags, ",")}})
}

// listAll reads every page of a list (Octavia answers at most its page
// limit, 1,000 by default, and a next link), following the next link's
// marker; key is the list's field in the answer.
func listAll[T any](ctx context.Context, o *Octavia, base, key string, q url.Values) ([]T, error) {
	if q == nil {
		q = url.Values{}
	}
	var all []T
	for {
		var out map[string]json.RawMessage
		u := base
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		if err := o.get(ctx, u, &out); err != nil {
			return nil, err
		}
		var page []T
		if err := json.Unmarshal(out[key], &page); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		var links []struct {
			Href string `json:"href"`
			Rel  string `json:"rel"`
		}
		if raw, ok := out[key+"_links"]; ok {
			if err := json.Unmarshal(raw, &links); err != nil {
				return nil, fmt.Errorf("%s_links: %w", key, err)
			}
		}
		all = append(all, page...)
		marker := ""
		for _, l := range links {
			if u, err := url.Parse(l.Href); err == nil && l.Rel == "next" {
				marker = u.Query().Get("marker")
			}
		}
		if marker == "" || len(page) == 0 || marker == q.Get("marker") {
			return all, nil
		}
		q.Set("marker", marker)
	}
}

func (o *Octavia) url(parts ...string) string {
	return o.Client.ServiceURL(append([]string{"lbaas"}, parts...)...)
}

func (o *Octavia) get(ctx context.Context, u string, into any) error {
	_, err := o.Client.Get(ctx, u, into, &gophercloud.RequestOpts{OkCodes: []int{200}})
	return err
}

// waitActive waits until the load balancer is ACTIVE; ERROR is a failure.
// It returns the read that saw ACTIVE.
func (o *Octavia) waitActive(ctx context.Context, id string) (Check, error) {
	return o.wait(ctx, id, func(status string, gone bool) (bool, error) {
		switch {
		case gone:
			return false, fmt.Errorf("load balancer %s disappeared", id)
		case status == "ACTIVE":
			return true, nil
		case status == "ERROR":
			return false, fmt.Errorf("load balancer %s went to ERROR", id)
		}
		return false, nil
	})
}

func (o *Octavia) waitGone(ctx context.Context, id string) error {
	_, err := o.wait(ctx, id, func(_ string, gone bool) (bool, error) { return gone, nil })
	return err
}

// Check is one read of a load balancer's state.
type Check struct {
	Status string
	// UpdatedAt is the load balancer's updated_at. Octavia stamps it
	// whenever a change anywhere in the load balancer's tree completes
	// (every change locks the load balancer, PENDING_UPDATE, and its
	// completion stamps it ACTIVE again; flowlb to the microsecond), so
	// the same value at ACTIVE later means nothing was changed since.
	UpdatedAt string
	// Gone: the load balancer does not exist.
	Gone bool
}

// Check reads the load balancer's provisioning status and updated_at
// once.
func (o *Octavia) Check(ctx context.Context, id string) (Check, error) {
	var out struct {
		LB ActualLB `json:"loadbalancer"`
	}
	// Only these fields: flowlb then reads the load balancer's row alone,
	// not its listeners and pools, however often it is asked.
	err := o.get(ctx, o.url("loadbalancers", id)+"?fields=id&fields=provisioning_status&fields=updated_at", &out)
	if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return Check{Gone: true}, nil
	}
	return Check{Status: out.LB.ProvisioningStatus, UpdatedAt: out.LB.UpdatedAt}, err
}

// Status reads the load balancer's provisioning status once; gone when
// it does not exist.
func (o *Octavia) Status(ctx context.Context, id string) (status string, gone bool, err error) {
	c, err := o.Check(ctx, id)
	return c.Status, c.Gone, err
}

func (o *Octavia) wait(ctx context.Context, id string, done func(status string, gone bool) (bool, error)) (Check, error) {
	maxPoll, timeout := o.Poll, o.Timeout
	if maxPoll == 0 {
		maxPoll = 100 * time.Millisecond
	}
	poll := min(2*time.Millisecond, maxPoll)
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	deadline := time.Now().Add(timeout)
	for {
		c, err := o.Check(ctx, id)
		if err != nil {
			return Check{}, err
		}
		if ok, err := done(c.Status, c.Gone); ok || err != nil {
			return c, err
		}
		if time.Now().After(deadline) {
			return Check{}, errors.New("timed out waiting for load balancer " + id)
		}
		select {
		case <-ctx.Done():
			return Check{}, ctx.Err()
		case <-time.After(poll):
		}
		poll = min(2*poll, maxPoll)
	}
}
