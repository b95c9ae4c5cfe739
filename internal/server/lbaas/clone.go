package lbaas

// clone copies the tree and each of its objects, so that a completion
// that starts from the tree its change built (kept by the store, Keep)
// changes their statuses and removes them without sharing anything it
// writes with the tree the request answers from. The objects' slices
// and maps (tags, CIDRs, headers) are shared: no completion writes them.
// Floating IPs and security rules are read only.
func (t *Tree) clone() *Tree {
	lb := *t.LB
	return &Tree{
		LB:          &lb,
		Listeners:   cloneAll(t.Listeners),
		Pools:       cloneAll(t.Pools),
		Members:     cloneAll(t.Members),
		Monitors:    cloneAll(t.Monitors),
		L7Policies:  cloneAll(t.L7Policies),
		L7Rules:     cloneAll(t.L7Rules),
		FloatingIPs: append([]*FloatingIP(nil), t.FloatingIPs...),
		Security:    t.Security,
	}
}

func cloneAll[T any](xs []*T) []*T {
	out := make([]*T, len(xs))
	for i, x := range xs {
		v := *x
		out[i] = &v
	}
	return out
}
