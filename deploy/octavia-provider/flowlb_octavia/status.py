"""flowlb's statuses to Octavia's status report (pure).

flowlb answers a load balancer's status tree as Octavia's API does
(listeners, their pools, members and health monitors); the pools no
listener uses are read beside it. A report gives Octavia the status of
every object of the tree, the parents of a changed object included (an
object left PENDING_UPDATE in Octavia locks the load balancer), and
DELETED for every object that was in the tree before a delete and is
gone after it (a cascade's children too, or their rows stay ACTIVE).
"""

# The report's list of each kind (octavia_lib.common.constants).
REPORT_KEYS = {
    'loadbalancer': 'loadbalancers',
    'listener': 'listeners',
    'pool': 'pools',
    'member': 'members',
    'healthmonitor': 'healthmonitors',
    'l7policy': 'l7policies',
    'l7rule': 'l7rules',
}

PENDING = ('PENDING_CREATE', 'PENDING_UPDATE', 'PENDING_DELETE')


def settled(tree):
    """Whether a status tree's load balancer is out of PENDING_*."""
    return _lb(tree).get('provisioning_status') not in PENDING


def _lb(tree):
    return tree['statuses']['loadbalancer']


def _status(o):
    return (o.get('provisioning_status'), o.get('operating_status'))


def objects(tree, other_pools=(), extra=(), parents=None):
    """Every object of a status tree as {(kind, id): (provisioning,
    operating)}. other_pools: pools no listener uses, each
    {"pool": pool, "members": [member, ...]} as flowlb's API shows
    them (with the pool's health monitor as "healthmonitor", or None);
    extra: more (kind, object) pairs read on their own (L7 policies and
    rules, which the status tree does not show). parents, a dict, gets
    each object's parents as a set of (kind, id) (see lineage)."""
    out = {}
    if parents is None:
        parents = {}
    lb = _lb(tree)
    lb_key = ('loadbalancer', lb['id'])
    out[lb_key] = _status(lb)

    def pool(p, members, hm, listener=None):
        key = ('pool', p['id'])
        out[key] = _status(p)
        parents.setdefault(key, {lb_key})
        if listener:
            parents[key].add(listener)
        for m in members:
            out[('member', m['id'])] = _status(m)
            parents[('member', m['id'])] = {key}
        if hm:
            out[('healthmonitor', hm['id'])] = _status(hm)
            parents[('healthmonitor', hm['id'])] = {key}

    for li in lb.get('listeners') or []:
        li_key = ('listener', li['id'])
        out[li_key] = _status(li)
        parents[li_key] = {lb_key}
        for p in li.get('pools') or []:
            pool(p, p.get('members') or [], p.get('health_monitor'), li_key)
    for op in other_pools:
        pool(op['pool'], op.get('members') or [], op.get('healthmonitor'))
    for kind, o in extra:
        out[(kind, o['id'])] = _status(o)
        parent = lb_key
        if kind == 'l7policy' and o.get('listener_id'):
            parent = ('listener', o['listener_id'])
        elif kind == 'l7rule' and o.get('l7policy_id'):
            parent = ('l7policy', o['l7policy_id'])
        parents[(kind, o['id'])] = {parent}
    return out


def lineage(parents, key):
    """key and its ancestors (objects()'s parents): the objects Octavia
    sets PENDING_* with a change of key, which its report must settle
    (a member's pool, the pool's listeners, the load balancer)."""
    out, todo = set(), [key]
    while todo:
        k = todo.pop()
        if k in out:
            continue
        out.add(k)
        todo.extend(parents.get(k, ()))
    return out


def report(now, before=None, only=None):
    """The report of a settled change: every object of now (objects()'s
    answer, or None once the load balancer is gone) with its statuses,
    or of those in only (a set of keys) if given, and every object of
    before that now lacks as DELETED. Octavia renews the updated_at of
    each object reported, so a change reports what it locked, not its
    siblings (API clients compare the siblings' fields across calls)."""
    gone = set(before or {}) - set(now or {})
    now = now or {}
    if only is not None:
        now = {k: v for k, v in now.items() if k in only}
    before = {k: None for k in gone}
    rep = {}

    def add(kind, oid, prov, oper):
        entry = {'id': oid, 'provisioning_status': prov}
        if oper:
            entry['operating_status'] = oper
        rep.setdefault(REPORT_KEYS[kind], []).append(entry)

    for (kind, oid), (prov, oper) in sorted(now.items()):
        add(kind, oid, prov, oper)
    for (kind, oid) in sorted(set(before or {}) - set(now)):
        add(kind, oid, 'DELETED', None)
    return rep


def failed(kind, oid, lb_id):
    """The report of a change flowlb did not settle in time: the object
    in ERROR, and its load balancer ACTIVE again so that the user can
    change or delete it."""
    rep = {REPORT_KEYS[kind]: [{'id': oid, 'provisioning_status': 'ERROR'}]}
    if kind != 'loadbalancer':
        rep['loadbalancers'] = [{'id': lb_id,
                                 'provisioning_status': 'ACTIVE'}]
    return rep


# The provider agent's translations: flowlb's status feed (GET
# /v2/flowlb/changes and /v2/flowlb/statuses) and statistics to Octavia's
# reports.

def octavia_statuses(lb):
    """Every object of a load balancer of Octavia's database (an
    octavia.common.data_models.LoadBalancer, as its repositories answer
    it: listeners with their L7 policies and rules, pools with their
    members and health monitor), as {(kind, id): (provisioning,
    operating)}; None without one, or once Octavia has it DELETED."""
    if lb is None or lb.provisioning_status == 'DELETED':
        return None
    out = {}

    def add(kind, o):
        out[(kind, o.id)] = (o.provisioning_status,
                             getattr(o, 'operating_status', None))

    add('loadbalancer', lb)
    for li in lb.listeners or []:
        add('listener', li)
        for pol in li.l7policies or []:
            add('l7policy', pol)
            for r in pol.l7rules or []:
                add('l7rule', r)
    for p in lb.pools or []:
        add('pool', p)
        for m in p.members or []:
            add('member', m)
        if p.health_monitor is not None:
            add('healthmonitor', p.health_monitor)
    return out


STALE_STATUSES = PENDING + ('ERROR',)


def feed_objects(tree):
    """A load balancer of flowlb's feed as objects() answers a status
    tree: {(kind, id): (provisioning, operating)}; None once it is
    gone."""
    if tree.get('gone'):
        return None
    return {(o['kind'], o['id']): (o['provisioning_status'],
                                   o['operating_status'])
            for o in tree.get('objects') or []}


def mirror(tree, octavia, stale):
    """What Octavia must be told of a load balancer of flowlb's feed, or
    None. octavia: the statuses Octavia's database holds of its objects
    ({(kind, id): (provisioning, operating)}; None or empty when Octavia
    has no such load balancer: one made in flowlb directly); stale:
    Octavia has shown the load balancer in PENDING_* (or ERROR) for
    longer than a change's own status report takes.

    Operating statuses are flowlb's to measure: each that differs is
    reported, alone. Provisioning statuses are the change's status
    waiter's to report, so that a report of the agent never takes a load
    balancer out of PENDING_* while a change is in flight; only for a
    stale one, whose waiter is gone, does the agent report the whole
    tree as flowlb has it (objects Octavia has and flowlb no longer has
    DELETED; a load balancer gone from flowlb DELETED with all its
    objects if Octavia was deleting it, and ERROR if not: lost). Nothing
    is reported while flowlb has a change in flight."""
    if not octavia:
        return None
    now = feed_objects(tree)
    if now is not None:
        lb = now.get(('loadbalancer', tree['id']))
        if lb is None or lb[0] in PENDING:
            return None
    if stale:
        lb = octavia.get(('loadbalancer', tree['id']))
        if now is None and (lb is None or lb[0] != 'PENDING_DELETE'):
            return lost(octavia)
        return report(now, {k: None for k in octavia})
    rep = {}
    for (kind, oid), (prov, oper) in sorted((now or {}).items()):
        had = octavia.get((kind, oid))
        if had is None or had[1] == oper or not oper:
            continue
        rep.setdefault(REPORT_KEYS[kind], []).append(
            {'id': oid, 'operating_status': oper})
    return rep or None


def lost(octavia):
    """The report of a load balancer Octavia holds and flowlb does not,
    though Octavia was not deleting it (flowlb lost it, or it was deleted
    in flowlb directly): what Octavia shows in PENDING_* becomes ERROR,
    so that an operator sees it and a delete can clear it; DELETED would
    hide that flowlb had dropped an object Octavia committed. None if
    nothing is pending."""
    rep = {}
    for (kind, oid), (prov, _) in sorted(octavia.items()):
        if prov in PENDING:
            rep.setdefault(REPORT_KEYS[kind], []).append(
                {'id': oid, 'provisioning_status': 'ERROR'})
    return rep or None


def listener_statistics(listeners, octavia_lbs, last):
    """Octavia's statistics report of flowlb's listener statistics
    (GET /v2/flowlb/statistics), for the listeners of load balancers
    octavia_lbs holds, leaving out those whose counters are as last
    reported (last: {listener id: counters}, updated in place)."""
    keys = ('bytes_in', 'bytes_out', 'active_connections',
            'total_connections', 'request_errors')
    out = []
    for li in listeners:
        if li['loadbalancer_id'] not in octavia_lbs:
            continue
        counters = tuple(li[k] for k in keys)
        if last.get(li['id']) == counters:
            continue
        last[li['id']] = counters
        entry = {'id': li['id']}
        entry.update(zip(keys, counters))
        out.append(entry)
    return {'listeners': out} if out else None
