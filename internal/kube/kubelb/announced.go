package kubelb

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
)

// Announced is what flowlb's extension of the Octavia API tells of a
// load balancer's addresses (GET .../loadbalancers/{id}/announcements):
// per address, the nodes announcing it to the network and whether it is
// within some node's announced ranges; how many nodes announce anything;
// how many live agents the replica that answered cannot see. Unknown:
// the API has no such route (Octavia, an older flowlb).
type Announced struct {
	Unknown    bool
	Nodes      map[netip.Addr][]string
	InRanges   map[netip.Addr]bool
	Announcing int
	Unseen     int
}

// Announced reads who announces load balancer id's addresses.
func (o *Octavia) Announced(ctx context.Context, id string) (Announced, error) {
	var out struct {
		A struct {
			Addresses []struct {
				Address  string   `json:"address"`
				Nodes    []string `json:"nodes"`
				InRanges bool     `json:"in_announced_ranges"`
			} `json:"addresses"`
			Announcing int `json:"announcing_nodes"`
			Unseen     int `json:"unseen_nodes"`
		} `json:"announcements"`
	}
	err := o.get(ctx, o.url("loadbalancers", id, "announcements"), &out)
	if gophercloud.ResponseCodeIs(err, http.StatusNotFound) || gophercloud.ResponseCodeIs(err, http.StatusMethodNotAllowed) {
		return Announced{Unknown: true}, nil
	}
	if err != nil {
		return Announced{}, err
	}
	a := Announced{Nodes: map[netip.Addr][]string{}, InRanges: map[netip.Addr]bool{}, Announcing: out.A.Announcing, Unseen: out.A.Unseen}
	for _, ad := range out.A.Addresses {
		v, err := netip.ParseAddr(ad.Address)
		if err != nil {
			return Announced{}, fmt.Errorf("announcements of load balancer %s: address %q: %w", id, ad.Address, err)
		}
		a.Nodes[v], a.InRanges[v] = ad.Nodes, ad.InRanges
	}
	return a, nil
}

// Gate is whether a Service's external addresses may be written to its
// status now: Publish, and why (for an event or a log line); Warn when
// they are written without a node known to announce them.
type Gate struct {
	Publish bool
	Warn    bool
	Why     string
}

// IngressGate decides whether ingress, a Service's external addresses,
// may be published after waiting waited: once a node announces one of
// them; at once when flowlb's nodes do not announce them at all (the API
// cannot tell, no node announces anything, or none of them is within a
// node's announced ranges: the network reaches them by other means);
// never while they are within a node's ranges and no node announces
// them, when the replica asked sees every node (a Local Service with no
// ready pod is announced by none); and after limit when it does not (the
// announcing node may stream to another replica), with a warning.
func IngressGate(a Announced, ingress []string, waited, limit time.Duration) Gate {
	if a.Unknown {
		return Gate{Publish: true, Why: "the API does not tell announcements"}
	}
	inRanges := false
	for _, s := range ingress {
		v, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		if nodes := a.Nodes[v]; len(nodes) > 0 {
			return Gate{Publish: true, Why: fmt.Sprintf("%s is announced by %s", v, strings.Join(slices.Sorted(slices.Values(nodes)), ", "))}
		}
		inRanges = inRanges || a.InRanges[v]
	}
	switch {
	case a.Unseen == 0 && !inRanges && a.Announcing == 0:
		return Gate{Publish: true, Why: "no node announces external addresses"}
	case a.Unseen == 0 && !inRanges:
		return Gate{Publish: true, Why: "outside every node's announced ranges"}
	case a.Unseen == 0:
		return Gate{Why: "no node announces it yet"}
	case waited >= limit:
		return Gate{Publish: true, Warn: true, Why: fmt.Sprintf("no node this API replica sees announces it after %s; %d nodes stream to other replicas", waited.Round(time.Millisecond), a.Unseen)}
	}
	return Gate{Why: fmt.Sprintf("no node this API replica sees announces it yet; %d nodes stream to other replicas", a.Unseen)}
}
