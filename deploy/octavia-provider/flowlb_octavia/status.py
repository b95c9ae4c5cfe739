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


def objects(tree, other_pools=(), extra=()):
    """Every object of a status tree as {(kind, id): (provisioning,
    operating)}. other_pools: pools no listener uses, each
    {"pool": pool, "members": [member, ...]} as flowlb's API shows
    them (with the pool's health monitor as "healthmonitor", or None);
    extra: more (kind, object) pairs read on their own (L7 policies and
    rules, which the status tree does not show)."""
    out = {}
    lb = _lb(tree)
    out[('loadbalancer', lb['id'])] = _status(lb)

    def pool(p, members, hm):
        out[('pool', p['id'])] = _status(p)
        for m in members:
            out[('member', m['id'])] = _status(m)
        if hm:
            out[('healthmonitor', hm['id'])] = _status(hm)

    for li in lb.get('listeners') or []:
        out[('listener', li['id'])] = _status(li)
        for p in li.get('pools') or []:
            pool(p, p.get('members') or [], p.get('health_monitor'))
    for op in other_pools:
        pool(op['pool'], op.get('members') or [], op.get('healthmonitor'))
    for kind, o in extra:
        out[(kind, o['id'])] = _status(o)
    return out


def report(now, before=None):
    """The report of a settled change: every object of now (objects()'s
    answer, or None once the load balancer is gone) with its statuses,
    and every object of before that now lacks as DELETED."""
    now = now or {}
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
