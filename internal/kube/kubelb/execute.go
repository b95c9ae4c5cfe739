package kubelb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"

	"github.com/gophercloud/gophercloud/v2"

	"github.com/flowlb/flowlb/internal/shared/octaviaext"
)

// execution sends the calls of a plan in order: it resolves their
// references to the ids earlier calls returned, and waits after each as
// the plan says. It stops at the first failure.
type execution struct {
	*Octavia
	ids map[Ref]string
	vip Result // the load balancer the plan created
	// listeners are the created load balancer's, as its fully populated
	// create answered them (each with its default pool's id).
	listeners []ActualListener
	calls     int    // calls sent, the failed one included
	pending   string // with Defer, the load balancer the last call left to wait for
	// nameChecked: the API answered the load balancer's create saying it
	// refuses a name in use (octaviaext.UniqueName).
	nameChecked bool
}

// ErrNameTaken: the API refused a load balancer's create because a load
// balancer of its name exists (flowlb's octaviaext.UniqueName); nothing
// was created.
var ErrNameTaken = errors.New("a load balancer of this name exists")

func (o *Octavia) execution() *execution {
	return &execution{Octavia: o, ids: map[Ref]string{}}
}

func (e *execution) run(ctx context.Context, plan []Call) error {
	for i, c := range plan {
		deferred := e.Defer && i == len(plan)-1 && c.Await == AwaitActive
		if deferred {
			c.Await = AwaitNothing
		}
		if err := e.call(ctx, c); err != nil {
			return err
		}
		if deferred {
			lb, err := e.resolvePath(c.LB)
			if err != nil {
				return err
			}
			e.pending = lb
		}
	}
	return nil
}

// created is the part of a create's answer ({"listener": {...}}) an
// execution keeps.
type created struct {
	ID             string           `json:"id"`
	VIPAddress     string           `json:"vip_address"`
	VIPPortID      string           `json:"vip_port_id"`
	AdditionalVIPs []ActualVIP      `json:"additional_vips"`
	Listeners      []ActualListener `json:"listeners"`
}

func (e *execution) call(ctx context.Context, c Call) error {
	path, err := e.resolvePath(c.Path)
	if err != nil {
		return err
	}
	body, err := e.resolveBody(c.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.Method, path, err)
	}
	var out map[string]created
	var into any
	if c.Creates != "" {
		into = &out
	}
	e.calls++
	err = e.send(ctx, c.Method, e.Client.ServiceURL(path), body, into, c.Creates == RefLoadBalancer)
	if c.Method == http.MethodDelete && c.Await == AwaitGone && gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		return nil // already gone
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.Method, path, err)
	}
	if c.Creates != "" {
		if err := e.record(c.Creates, out); err != nil {
			return fmt.Errorf("%s %s: %w", c.Method, path, err)
		}
	}
	return e.await(ctx, c)
}

// send makes one request, expecting Octavia's success codes for method.
// A load balancer's create (lbCreate) is conditional on its name where
// the API offers it: flowlb refuses a second load balancer of one name
// (ErrNameTaken), so that a caller may create without listing the name
// first; a real Octavia ignores the header and says nothing of it.
func (e *execution) send(ctx context.Context, method, u string, body, into any, lbCreate bool) error {
	var err error
	switch method {
	case http.MethodPost:
		opts := &gophercloud.RequestOpts{OkCodes: []int{201}}
		if lbCreate {
			opts.MoreHeaders = map[string]string{octaviaext.UniqueName: octaviaext.Requested}
		}
		var resp *http.Response
		resp, err = e.Client.Post(ctx, u, body, into, opts)
		if lbCreate {
			var refused gophercloud.ErrUnexpectedResponseCode
			switch {
			case err == nil:
				e.nameChecked = resp.Header.Get(octaviaext.UniqueName) == octaviaext.Checked
			case errors.As(err, &refused) && refused.Actual == http.StatusConflict && refused.ResponseHeader.Get(octaviaext.UniqueName) == octaviaext.Taken:
				err = fmt.Errorf("%w: %w", ErrNameTaken, err)
			}
		}
	case http.MethodPut:
		_, err = e.Client.Put(ctx, u, body, into, &gophercloud.RequestOpts{OkCodes: []int{200, 202}})
	case http.MethodDelete:
		_, err = e.Client.Delete(ctx, u, &gophercloud.RequestOpts{OkCodes: []int{204}})
	default:
		err = fmt.Errorf("method %s is not one a plan uses", method)
	}
	return err
}

// record keeps the id a create returned under ref.
func (e *execution) record(ref Ref, out map[string]created) error {
	if len(out) != 1 {
		return fmt.Errorf("want one object in the answer, got %d", len(out))
	}
	for _, obj := range out {
		if obj.ID == "" {
			return fmt.Errorf("the answer has no id for %s", ref)
		}
		e.ids[ref] = obj.ID
		if ref == RefLoadBalancer {
			e.vip = Result{VIPAddress: obj.VIPAddress, VIPPortID: obj.VIPPortID, AdditionalVIPs: obj.AdditionalVIPs}
			e.listeners = obj.Listeners
		}
	}
	return nil
}

func (e *execution) await(ctx context.Context, c Call) error {
	if c.Await == AwaitNothing {
		return nil
	}
	lb, err := e.resolvePath(c.LB)
	if err != nil {
		return err
	}
	if c.Await == AwaitGone {
		return e.waitGone(ctx, lb)
	}
	_, err = e.waitActive(ctx, lb)
	return err
}

var refPattern = regexp.MustCompile(`\{[^{}]*\}`)

// resolvePath replaces each "{name}" in p with the id recorded for it.
func (e *execution) resolvePath(p string) (string, error) {
	var missing error
	out := refPattern.ReplaceAllStringFunc(p, func(m string) string {
		id, err := e.id(Ref(m[1 : len(m)-1]))
		if err != nil && missing == nil {
			missing = err
		}
		return id
	})
	return out, missing
}

// resolveBody is body with its Ref values replaced by ids. Objects
// without a reference are shared, not copied (a members list can be
// long), and the plan itself is left as it is.
func (e *execution) resolveBody(body map[string]any) (any, error) {
	if body == nil {
		return nil, nil
	}
	out, _, err := e.resolveObject(body)
	return out, err
}

func (e *execution) resolveObject(obj map[string]any) (map[string]any, bool, error) {
	var out map[string]any // a copy, made at the first reference
	for k, v := range obj {
		var resolved any
		switch v := v.(type) {
		case Ref:
			id, err := e.id(v)
			if err != nil {
				return nil, false, err
			}
			resolved = id
		case map[string]any:
			r, changed, err := e.resolveObject(v)
			if err != nil {
				return nil, false, err
			}
			if !changed {
				continue
			}
			resolved = r
		default:
			continue
		}
		if out == nil {
			out = maps.Clone(obj)
		}
		out[k] = resolved
	}
	if out == nil {
		return obj, false, nil
	}
	return out, true, nil
}

func (e *execution) id(r Ref) (string, error) {
	id, ok := e.ids[r]
	if !ok {
		return "", fmt.Errorf("reference %s to no earlier call's object", r)
	}
	return id, nil
}
