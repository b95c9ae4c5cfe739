package lbaas

// Objects created inside other objects' creates: a listener with its
// default pool and L7 policies, a pool with its members and monitor, a
// policy with its redirect pool and rules. The single-object creates and
// the fully populated create build them with the same functions; they
// differ only in where a nested pool comes from (poolSource).

// poolSource yields the pool a listener's default_pool or a policy's
// redirect_pool names; listener, if not nil, takes it as default pool.
type poolSource func(t *Tree, p NestedPool, listener *Listener) (*Pool, error)

// newPools is the source of the single-object creates: every nested pool
// is a new one.
func (s *Service) newPools(t *Tree, p NestedPool, listener *Listener) (*Pool, error) {
	return s.addPool(t, p.definition(), listener)
}

// addListener adds a listener with its nested default pool and policies.
func (s *Service) addListener(t *Tree, req *ListenerCreate, pools poolSource) (*Listener, error) {
	l, err := s.buildListener(t, req)
	if err != nil {
		return nil, err
	}
	t.add(l)
	if req.DefaultPool != nil {
		if _, err := pools(t, *req.DefaultPool, l); err != nil {
			return nil, err
		}
	}
	for i := range req.L7Policies {
		if _, err := s.addPolicy(t, l, &req.L7Policies[i], pools); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// addPool adds a pool with its members and monitor; listener, if not
// nil, takes it as its default pool.
func (s *Service) addPool(t *Tree, req *PoolCreate, listener *Listener) (*Pool, error) {
	p, err := s.buildPool(t, req, listener)
	if err != nil {
		return nil, err
	}
	t.add(p)
	if err := checkPoolSize(len(req.Members)); err != nil {
		return nil, err
	}
	idx := memberIndex{}
	for i := range req.Members {
		m, err := s.buildMember(t, p, &req.Members[i], idx)
		if err != nil {
			return nil, err
		}
		t.add(m)
	}
	if req.HealthMonitor != nil {
		h, err := s.buildMonitor(t, p, req.HealthMonitor)
		if err != nil {
			return nil, err
		}
		t.add(h)
	}
	return p, nil
}

// addPolicy adds an L7 policy of listener l with its redirect pool and
// rules.
func (s *Service) addPolicy(t *Tree, l *Listener, req *L7PolicyCreate, pools poolSource) (*L7Policy, error) {
	if req.RedirectPool != nil {
		p, err := pools(t, *req.RedirectPool, nil)
		if err != nil {
			return nil, err
		}
		id := p.ID
		req.RedirectPoolID = Some(&id)
	}
	pol, err := s.buildPolicy(t, l, req)
	if err != nil {
		return nil, err
	}
	t.add(pol)
	for i := range req.Rules {
		rule, err := s.buildRule(t, pol, &req.Rules[i])
		if err != nil {
			return nil, err
		}
		t.add(rule)
	}
	return pol, nil
}

// addGraph adds the listeners and pools of a fully populated create.
// Pools are named: each is defined once (in pools, as a listener's
// default_pool or as a policy's redirect_pool) and referred to elsewhere
// by its name alone. Listeners are built first, each pool when first
// used, and last the pools nothing used.
func (s *Service) addGraph(t *Tree, listeners []ListenerCreate, pools []NestedPool) error {
	g := &graph{s: s, defs: map[string]*PoolCreate{}, built: map[string]*Pool{}}
	if err := g.define(listeners, pools); err != nil {
		return err
	}
	for i := range listeners {
		if _, err := s.addListener(t, &listeners[i], g.pool); err != nil {
			return err
		}
	}
	for _, p := range pools {
		if _, err := g.pool(t, p, nil); err != nil {
			return err
		}
	}
	return nil
}

// graph resolves the pools of a fully populated create by name.
type graph struct {
	s     *Service
	defs  map[string]*PoolCreate
	built map[string]*Pool
}

// define records every pool definition of the request, refusing unnamed
// pools and names defined twice.
func (g *graph) define(listeners []ListenerCreate, pools []NestedPool) error {
	var all []NestedPool
	all = append(all, pools...)
	for _, l := range listeners {
		if l.DefaultPool != nil {
			all = append(all, *l.DefaultPool)
		}
		for _, pol := range l.L7Policies {
			if pol.RedirectPool != nil {
				all = append(all, *pol.RedirectPool)
			}
		}
	}
	for _, p := range all {
		if p.Name == "" {
			return Validation("Pools must be named when creating a fully populated loadbalancer.")
		}
		if p.Def == nil {
			continue
		}
		if _, dup := g.defs[p.Name]; dup {
			return Validation("Pool %s is defined more than once.", p.Name)
		}
		g.defs[p.Name] = p.Def
	}
	return nil
}

// pool is the poolSource of a fully populated create: the pool of that
// name, built at its first use.
func (g *graph) pool(t *Tree, ref NestedPool, listener *Listener) (*Pool, error) {
	if p := g.built[ref.Name]; p != nil {
		if listener != nil {
			if err := compatible(listener.Protocol, p.Protocol); err != nil {
				return nil, err
			}
			id := p.ID
			listener.DefaultPoolID = &id
		}
		return p, nil
	}
	def, ok := g.defs[ref.Name]
	if !ok {
		return nil, Invalid("Missing details for Pool object: %s", ref.Name)
	}
	p, err := g.s.addPool(t, def, listener)
	if err != nil {
		return nil, err
	}
	g.built[ref.Name] = p
	return p, nil
}
