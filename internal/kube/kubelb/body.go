package kubelb

// The request bodies of the calls Plan makes, in Octavia's terms.

// createBody is a fully populated load balancer: listeners, pools,
// members and monitors in one create.
func createBody(want *LB) map[string]any {
	b := map[string]any{"name": want.Name, "description": want.Description, "tags": want.Tags,
		"vip_subnet_id": want.VIP.SubnetID, "listeners": listenersBody(want.Listeners)}
	if want.VIP.Address != "" {
		b["vip_address"] = want.VIP.Address
	}
	if len(want.AdditionalVIPs) > 0 {
		var vs []ActualVIP
		for _, v := range want.AdditionalVIPs {
			vs = append(vs, ActualVIP{SubnetID: v.SubnetID, IPAddress: v.Address})
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
