package octavia

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/flowlb/flowlb/internal/server/lbaas"
	"github.com/flowlb/flowlb/internal/server/octavia/fault"
)

// VIPPortsRequest is the body of POST /v2/flowlb/vip_ports: what
// octavia-lib's create_vip_port hands a provider driver, in the names of
// its VIP dictionary.
type VIPPortsRequest struct {
	LoadBalancerID string             `json:"loadbalancer_id"`
	ProjectID      string             `json:"project_id"`
	VIPSubnetID    string             `json:"vip_subnet_id"`
	VIPNetworkID   string             `json:"vip_network_id"`
	VIPAddress     string             `json:"vip_address"`
	AdditionalVIPs []AdditionalVIPRef `json:"additional_vips"`
}

// AdditionalVIPRef is an additional VIP of VIPPortsRequest and of its
// answer.
type AdditionalVIPRef struct {
	SubnetID  string `json:"subnet_id"`
	IPAddress string `json:"ip_address"`
	PortID    string `json:"port_id,omitempty"`
	NetworkID string `json:"network_id,omitempty"`
}

// VIPPortsResponse is the answer: the VIP dictionary octavia-lib wants
// back, and the additional VIPs.
type VIPPortsResponse struct {
	VIPPortID      string             `json:"vip_port_id"`
	VIPAddress     string             `json:"vip_address"`
	VIPSubnetID    string             `json:"vip_subnet_id"`
	VIPNetworkID   string             `json:"vip_network_id"`
	AdditionalVIPs []AdditionalVIPRef `json:"additional_vips"`
}

func (s *Server) vipPortRoutes() {
	s.handle("POST /flowlb/vip_ports", s.makeVIPPorts)
}

// makeVIPPorts makes a load balancer's VIP ports ahead of its create, or
// answers 501 when Octavia's network driver is to make them.
func (s *Server) makeVIPPorts(w http.ResponseWriter, r *http.Request) {
	var req VIPPortsRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.fail(w, r, fault.New(http.StatusRequestEntityTooLarge, "Request is too large."))
			return
		}
		s.fail(w, r, fault.BadRequest("Invalid VIP ports request: %v", err))
		return
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		s.fail(w, r, fault.BadRequest("Invalid VIP ports request: more than one JSON value"))
		return
	}
	lr := lbaas.VIPPortsRequest{LoadBalancerID: req.LoadBalancerID, ProjectID: req.ProjectID,
		SubnetID: req.VIPSubnetID, NetworkID: req.VIPNetworkID, Address: req.VIPAddress}
	for _, av := range req.AdditionalVIPs {
		lr.Additional = append(lr.Additional, lbaas.AdditionalVIP{SubnetID: av.SubnetID, IPAddress: av.IPAddress})
	}
	vip, more, err := s.svc.MakeVIPPorts(r.Context(), lr)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := VIPPortsResponse{VIPPortID: vip.PortID, VIPAddress: vip.Address, VIPSubnetID: vip.SubnetID, VIPNetworkID: vip.NetworkID,
		AdditionalVIPs: []AdditionalVIPRef{}}
	for _, v := range more {
		out.AdditionalVIPs = append(out.AdditionalVIPs, AdditionalVIPRef{SubnetID: v.SubnetID, IPAddress: v.Address, PortID: v.PortID, NetworkID: v.NetworkID})
	}
	writeJSON(w, http.StatusCreated, out)
}
