package kubelb

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
)

// Octavia applies desired load balancers through an Octavia v2 API with
// the fewest calls: one fully populated create, then per-object updates,
// and one batch call for all of a pool's members.
type Octavia struct {
	Client *gophercloud.ServiceClient
	// Poll is the longest wait between two checks for ACTIVE (default
	// 100 ms; the first checks come sooner, as flowlb's changes take
	// milliseconds); Timeout how long it may take (default 2 minutes).
	Poll, Timeout time.Duration
}

// session is one Apply or Delete: it counts the calls that change
// something.
type session struct {
	*Octavia
	calls int
}

// The parts of Octavia's objects the applier compares.
type (
	actualLB struct {
		ID                 string    `json:"id"`
		Name               string    `json:"name"`
		VIPAddress         string    `json:"vip_address"`
		VIPSubnetID        string    `json:"vip_subnet_id"`
		AdditionalVIPs     []wireVIP `json:"additional_vips"`
		ProvisioningStatus string    `json:"provisioning_status"`
		Provider           string    `json:"provider"`
		Tags               []string  `json:"tags"`
	}
	wireVIP struct {
		SubnetID  string `json:"subnet_id"`
		IPAddress string `json:"ip_address,omitempty"`
	}
	actualListener struct {
		ID            string   `json:"id"`
		Name          string   `json:"name"`
		Protocol      string   `json:"protocol"`
		ProtocolPort  int      `json:"protocol_port"`
		AllowedCIDRs  []string `json:"allowed_cidrs"`
		Tags          []string `json:"tags"`
		DefaultPoolID string   `json:"default_pool_id"`
		ClientData    int      `json:"timeout_client_data"`
		MemberConnect int      `json:"timeout_member_connect"`
		MemberData    int      `json:"timeout_member_data"`
		TCPInspect    int      `json:"timeout_tcp_inspect"`
	}
	actualPool struct {
		ID                 string       `json:"id"`
		Name               string       `json:"name"`
		LBAlgorithm        string       `json:"lb_algorithm"`
		SessionPersistence *wirePersist `json:"session_persistence"`
		HealthMonitorID    string       `json:"healthmonitor_id"`
	}
	wirePersist struct {
		Type               string `json:"type"`
		PersistenceTimeout int    `json:"persistence_timeout,omitempty"`
	}
	actualMember struct {
		Name         string   `json:"name"`
		Address      string   `json:"address"`
		ProtocolPort int      `json:"protocol_port"`
		Tags         []string `json:"tags"`
	}
	actualMonitor struct {
		ID             string `json:"id"`
		Type           string `json:"type"`
		Delay          int    `json:"delay"`
		Timeout        int    `json:"timeout"`
		MaxRetries     int    `json:"max_retries"`
		MaxRetriesDown int    `json:"max_retries_down"`
	}
)

func (o *Octavia) url(parts ...string) string {
	return o.Client.ServiceURL(append([]string{"lbaas"}, parts...)...)
}

func (o *Octavia) get(ctx context.Context, u string, into any) error {
	_, err := o.Client.Get(ctx, u, into, &gophercloud.RequestOpts{OkCodes: []int{200}})
	return err
}

func (o *session) send(ctx context.Context, method, u string, body any, into any, ok ...int) error {
	o.calls++
	opts := &gophercloud.RequestOpts{OkCodes: ok}
	var err error
	switch method {
	case http.MethodPost:
		_, err = o.Client.Post(ctx, u, body, into, opts)
	case http.MethodPut:
		_, err = o.Client.Put(ctx, u, body, into, opts)
	case http.MethodDelete:
		_, err = o.Client.Delete(ctx, u, opts)
	}
	return err
}

// Find returns the load balancer named name, or nil.
func (o *Octavia) Find(ctx context.Context, name string) (*actualLB, error) {
	var out struct {
		LBs []actualLB `json:"loadbalancers"`
	}
	if err := o.get(ctx, o.url("loadbalancers")+"?name="+url.QueryEscape(name), &out); err != nil {
		return nil, err
	}
	if len(out.LBs) == 0 {
		return nil, nil
	}
	return &out.LBs[0], nil
}

// Owned lists the load balancers carrying every tag in tags.
func (o *Octavia) Owned(ctx context.Context, tags ...string) ([]actualLB, error) {
	var out struct {
		LBs []actualLB `json:"loadbalancers"`
	}
	q := url.Values{"tags": {strings.Join(tags, ",")}}
	if err := o.get(ctx, o.url("loadbalancers")+"?"+q.Encode(), &out); err != nil {
		return nil, err
	}
	return out.LBs, nil
}

// Delete removes a load balancer and everything under it.
func (o *Octavia) Delete(ctx context.Context, id string) error {
	return (&session{Octavia: o}).delete(ctx, id)
}

func (o *session) delete(ctx context.Context, id string) error {
	err := o.send(ctx, http.MethodDelete, o.url("loadbalancers", id)+"?cascade=true", nil, nil, 204)
	if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return o.waitGone(ctx, id)
}

// Apply makes Octavia hold want and returns the load balancer's primary
// VIP address and the number of calls that changed something.
func (o *Octavia) Apply(ctx context.Context, want *LB) (vip string, calls int, err error) {
	s := &session{Octavia: o}
	vip, err = s.apply(ctx, want)
	return vip, s.calls, err
}

func (o *session) apply(ctx context.Context, want *LB) (string, error) {
	cur, err := o.Find(ctx, want.Name)
	if err != nil {
		return "", err
	}
	if cur != nil && !sameVIPs(cur, want) {
		// A VIP cannot change in place: replace the load balancer.
		if err := o.delete(ctx, cur.ID); err != nil {
			return "", err
		}
		cur = nil
	}
	if cur == nil {
		var out struct {
			LB actualLB `json:"loadbalancer"`
		}
		if err := o.send(ctx, http.MethodPost, o.url("loadbalancers"), map[string]any{"loadbalancer": createBody(want)}, &out, 201); err != nil {
			return "", err
		}
		return out.LB.VIPAddress, o.waitActive(ctx, out.LB.ID)
	}
	if err := o.waitActive(ctx, cur.ID); err != nil {
		return "", err
	}
	if !sameSet(cur.Tags, want.Tags) {
		if err := o.change(ctx, cur.ID, http.MethodPut, o.url("loadbalancers", cur.ID), map[string]any{"loadbalancer": map[string]any{"tags": want.Tags}}); err != nil {
			return "", err
		}
	}
	var ls struct {
		Listeners []actualListener `json:"listeners"`
	}
	if err := o.get(ctx, o.url("listeners")+"?loadbalancer_id="+cur.ID, &ls); err != nil {
		return "", err
	}
	have := map[string]actualListener{}
	for _, l := range ls.Listeners {
		have[fmt.Sprintf("%s/%d", l.Protocol, l.ProtocolPort)] = l
	}
	for _, l := range want.Listeners {
		key := fmt.Sprintf("%s/%d", l.Protocol, l.Port)
		cl, ok := have[key]
		delete(have, key)
		if !ok {
			if err := o.addListener(ctx, cur.ID, l); err != nil {
				return "", err
			}
			continue
		}
		if err := o.syncListener(ctx, cur.ID, cl, l); err != nil {
			return "", err
		}
	}
	for _, cl := range have {
		if cl.DefaultPoolID != "" {
			if err := o.change(ctx, cur.ID, http.MethodDelete, o.url("pools", cl.DefaultPoolID), nil); err != nil {
				return "", err
			}
		}
		if err := o.change(ctx, cur.ID, http.MethodDelete, o.url("listeners", cl.ID), nil); err != nil {
			return "", err
		}
	}
	return cur.VIPAddress, nil
}

func sameVIPs(cur *actualLB, want *LB) bool {
	if cur.VIPSubnetID != want.VIP.SubnetID || (want.VIP.Address != "" && cur.VIPAddress != want.VIP.Address) {
		return false
	}
	if len(cur.AdditionalVIPs) != len(want.AdditionalVIPs) {
		return false
	}
	for i, v := range want.AdditionalVIPs {
		if cur.AdditionalVIPs[i].SubnetID != v.SubnetID || (v.Address != "" && cur.AdditionalVIPs[i].IPAddress != v.Address) {
			return false
		}
	}
	return true
}

// change sends one mutation and waits for the load balancer to settle:
// Octavia refuses the next change while it is PENDING_UPDATE.
func (o *session) change(ctx context.Context, lbID, method, u string, body any) error {
	ok := map[string][]int{http.MethodPost: {201}, http.MethodPut: {200, 202}, http.MethodDelete: {204}}[method]
	if err := o.send(ctx, method, u, body, nil, ok...); err != nil {
		return err
	}
	return o.waitActive(ctx, lbID)
}

func createBody(want *LB) map[string]any {
	b := map[string]any{"name": want.Name, "description": want.Description, "tags": want.Tags,
		"vip_subnet_id": want.VIP.SubnetID, "listeners": listenersBody(want.Listeners)}
	if want.VIP.Address != "" {
		b["vip_address"] = want.VIP.Address
	}
	if len(want.AdditionalVIPs) > 0 {
		var vs []wireVIP
		for _, v := range want.AdditionalVIPs {
			vs = append(vs, wireVIP{SubnetID: v.SubnetID, IPAddress: v.Address})
		}
		b["additional_vips"] = vs
	}
	return b
}

func listenersBody(ls []Listener) []any {
	out := []any{}
	for _, l := range ls {
		lb := listenerBody(l)
		lb["protocol"], lb["protocol_port"] = l.Protocol, l.Port
		pb := poolBody(l.Pool)
		pb["protocol"] = l.Pool.Protocol
		pb["members"] = membersBody(l.Pool.Members)
		if l.Pool.Monitor != nil {
			pb["healthmonitor"] = monitorBody(*l.Pool.Monitor, true)
		}
		lb["default_pool"] = pb
		out = append(out, lb)
	}
	return out
}

func listenerBody(l Listener) map[string]any {
	t := l.Timeouts
	b := map[string]any{"name": l.Name, "tags": nonNil(l.Tags), "allowed_cidrs": nil,
		"timeout_client_data": t.ClientData, "timeout_member_connect": t.MemberConnect,
		"timeout_member_data": t.MemberData, "timeout_tcp_inspect": t.TCPInspect}
	if len(l.AllowedCIDRs) > 0 {
		b["allowed_cidrs"] = l.AllowedCIDRs
	}
	return b
}

func poolBody(p Pool) map[string]any {
	b := map[string]any{"name": p.Name, "lb_algorithm": p.Algorithm, "session_persistence": nil}
	if p.Persistence != nil {
		b["session_persistence"] = map[string]any{"type": p.Persistence.Type, "persistence_timeout": p.Persistence.Timeout}
	}
	return b
}

func membersBody(ms []Member) []any {
	out := []any{}
	for _, m := range ms {
		out = append(out, map[string]any{"name": m.Name, "address": m.Address, "protocol_port": m.Port, "tags": nonNil(m.Tags)})
	}
	return out
}

func monitorBody(m Monitor, withType bool) map[string]any {
	b := map[string]any{"delay": m.Delay, "timeout": m.Timeout, "max_retries": m.MaxRetries, "max_retries_down": m.MaxRetriesDown}
	if withType {
		b["type"] = m.Type
	}
	return b
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// addListener creates a listener, then its pool, members and monitor.
func (o *session) addListener(ctx context.Context, lbID string, l Listener) error {
	body := listenerBody(l)
	body["loadbalancer_id"], body["protocol"], body["protocol_port"] = lbID, l.Protocol, l.Port
	var out struct {
		L actualListener `json:"listener"`
	}
	if err := o.send(ctx, http.MethodPost, o.url("listeners"), map[string]any{"listener": body}, &out, 201); err != nil {
		return err
	}
	if err := o.waitActive(ctx, lbID); err != nil {
		return err
	}
	return o.addPool(ctx, lbID, out.L.ID, l.Pool)
}

func (o *session) addPool(ctx context.Context, lbID, listenerID string, p Pool) error {
	body := poolBody(p)
	body["listener_id"], body["protocol"] = listenerID, p.Protocol
	var out struct {
		P actualPool `json:"pool"`
	}
	if err := o.send(ctx, http.MethodPost, o.url("pools"), map[string]any{"pool": body}, &out, 201); err != nil {
		return err
	}
	if err := o.waitActive(ctx, lbID); err != nil {
		return err
	}
	if len(p.Members) > 0 {
		if err := o.change(ctx, lbID, http.MethodPut, o.url("pools", out.P.ID, "members"), map[string]any{"members": membersBody(p.Members)}); err != nil {
			return err
		}
	}
	if p.Monitor != nil {
		mb := monitorBody(*p.Monitor, true)
		mb["pool_id"] = out.P.ID
		return o.change(ctx, lbID, http.MethodPost, o.url("healthmonitors"), map[string]any{"healthmonitor": mb})
	}
	return nil
}

// syncListener brings an existing listener and its pool to l.
func (o *session) syncListener(ctx context.Context, lbID string, cl actualListener, l Listener) error {
	timeouts := Timeouts{ClientData: cl.ClientData, MemberConnect: cl.MemberConnect, MemberData: cl.MemberData, TCPInspect: cl.TCPInspect}
	if cl.Name != l.Name || !sameSet(cl.AllowedCIDRs, l.AllowedCIDRs) || !sameSet(cl.Tags, l.Tags) || timeouts != l.Timeouts {
		if err := o.change(ctx, lbID, http.MethodPut, o.url("listeners", cl.ID), map[string]any{"listener": listenerBody(l)}); err != nil {
			return err
		}
	}
	if cl.DefaultPoolID == "" {
		return o.addPool(ctx, lbID, cl.ID, l.Pool)
	}
	var pr struct {
		P actualPool `json:"pool"`
	}
	if err := o.get(ctx, o.url("pools", cl.DefaultPoolID), &pr); err != nil {
		return err
	}
	p := pr.P
	if p.LBAlgorithm != l.Pool.Algorithm || p.Name != l.Pool.Name || !samePersistence(p.SessionPersistence, l.Pool.Persistence) {
		if err := o.change(ctx, lbID, http.MethodPut, o.url("pools", p.ID), map[string]any{"pool": poolBody(l.Pool)}); err != nil {
			return err
		}
	}
	var mr struct {
		Members []actualMember `json:"members"`
	}
	if err := o.get(ctx, o.url("pools", p.ID, "members"), &mr); err != nil {
		return err
	}
	if !sameMembers(mr.Members, l.Pool.Members) {
		if err := o.change(ctx, lbID, http.MethodPut, o.url("pools", p.ID, "members"), map[string]any{"members": membersBody(l.Pool.Members)}); err != nil {
			return err
		}
	}
	return o.syncMonitor(ctx, lbID, p, l.Pool.Monitor)
}

func (o *session) syncMonitor(ctx context.Context, lbID string, p actualPool, want *Monitor) error {
	var cur *actualMonitor
	if p.HealthMonitorID != "" {
		var out struct {
			M actualMonitor `json:"healthmonitor"`
		}
		if err := o.get(ctx, o.url("healthmonitors", p.HealthMonitorID), &out); err != nil {
			return err
		}
		cur = &out.M
	}
	switch {
	case cur == nil && want == nil:
		return nil
	case cur != nil && (want == nil || cur.Type != want.Type):
		if err := o.change(ctx, lbID, http.MethodDelete, o.url("healthmonitors", cur.ID), nil); err != nil {
			return err
		}
		if want == nil {
			return nil
		}
		cur = nil
	}
	if cur == nil {
		mb := monitorBody(*want, true)
		mb["pool_id"] = p.ID
		return o.change(ctx, lbID, http.MethodPost, o.url("healthmonitors"), map[string]any{"healthmonitor": mb})
	}
	if cur.Delay != want.Delay || cur.Timeout != want.Timeout || cur.MaxRetries != want.MaxRetries || cur.MaxRetriesDown != want.MaxRetriesDown {
		return o.change(ctx, lbID, http.MethodPut, o.url("healthmonitors", cur.ID), map[string]any{"healthmonitor": monitorBody(*want, false)})
	}
	return nil
}

func samePersistence(cur *wirePersist, want *Persistence) bool {
	if cur == nil || want == nil {
		return (cur == nil) == (want == nil)
	}
	return cur.Type == want.Type && cur.PersistenceTimeout == want.Timeout
}

func sameMembers(cur []actualMember, want []Member) bool {
	if len(cur) != len(want) {
		return false
	}
	have := map[string]actualMember{}
	for _, m := range cur {
		have[hostPort(m.Address, m.ProtocolPort)] = m
	}
	for _, m := range want {
		c, ok := have[m.Key()]
		if !ok || c.Name != m.Name || !sameSet(c.Tags, m.Tags) {
			return false
		}
	}
	return true
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// waitActive waits until the load balancer is ACTIVE; ERROR is a failure.
func (o *Octavia) waitActive(ctx context.Context, id string) error {
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
	return o.wait(ctx, id, func(_ string, gone bool) (bool, error) { return gone, nil })
}

func (o *Octavia) wait(ctx context.Context, id string, done func(status string, gone bool) (bool, error)) error {
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
		var out struct {
			LB actualLB `json:"loadbalancer"`
		}
		err := o.get(ctx, o.url("loadbalancers", id), &out)
		gone := gophercloud.ResponseCodeIs(err, http.StatusNotFound)
		if err != nil && !gone {
			return err
		}
		if ok, err := done(out.LB.ProvisioningStatus, gone); ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("timed out waiting for load balancer " + id)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
		poll = min(2*poll, maxPoll)
	}
}
