"""Octavia's provider data models to flowlb's API bodies: the one place
where the two are translated.

Octavia hands a provider octavia-lib data models; flowlb serves Octavia's
own v2 API, so a translation is mostly a renaming of the id attribute
(``listener_id`` -> ``id``) and the removal of what the provider model
carries beside the API's attributes (the TLS secrets' contents, flavor
and availability zone metadata). Anything flowlb's API has no attribute
for is refused here with UnsupportedOptionError, never dropped.
"""

from octavia_lib.api.drivers import data_models
from octavia_lib.api.drivers import exceptions

# The id attribute of each kind in the provider model.
ID_KEYS = {
    'loadbalancer': 'loadbalancer_id',
    'listener': 'listener_id',
    'pool': 'pool_id',
    'member': 'member_id',
    'healthmonitor': 'healthmonitor_id',
    'l7policy': 'l7policy_id',
    'l7rule': 'l7rule_id',
}

# Attributes of the provider model that are no attribute of flowlb's API
# and are dropped on purpose: the secrets' contents (flowlb reads the
# references), the parent ids that are in the path of flowlb's call, the
# nested objects a fully populated create translates on its own.
_DROPPED = {
    'loadbalancer': {'flavor', 'availability_zone', 'listeners', 'pools'},
    'listener': {'default_tls_container_data', 'sni_container_data',
                 'client_ca_tls_container_data',
                 'client_crl_container_data', 'default_pool',
                 'l7policies'},
    'pool': {'tls_container_data', 'ca_tls_container_data',
             'crl_container_data', 'healthmonitor', 'members'},
    'member': {'pool_id'},
    'healthmonitor': set(),
    'l7policy': {'rules'},
    'l7rule': {'l7policy_id'},
}

# Attributes a flowlb create takes only where the object is created on
# its own, not nested in a load balancer's tree (the tree says them, and
# its objects are the load balancer's project).
_PARENTS = {'loadbalancer_id', 'listener_id', 'pool_id', 'project_id'}

# Every attribute flowlb's API takes, per kind (internal/server/octavia
# wire.go); one outside it is refused rather than dropped.
_ACCEPTED = {
    'loadbalancer': {'id', 'name', 'description', 'admin_state_up',
                     'project_id', 'vip_address', 'vip_port_id',
                     'vip_subnet_id', 'vip_network_id', 'vip_qos_policy_id',
                     'additional_vips', 'tags'},
    'listener': {'id', 'name', 'description', 'admin_state_up',
                 'project_id', 'loadbalancer_id', 'protocol',
                 'protocol_port', 'connection_limit',
                 'default_tls_container_ref', 'sni_container_refs',
                 'client_ca_tls_container_ref', 'client_crl_container_ref',
                 'client_authentication', 'default_pool_id',
                 'insert_headers', 'timeout_client_data',
                 'timeout_member_connect', 'timeout_member_data',
                 'timeout_tcp_inspect', 'allowed_cidrs', 'tls_ciphers',
                 'tls_versions', 'alpn_protocols', 'tags'},
    'pool': {'id', 'name', 'description', 'admin_state_up', 'project_id',
             'loadbalancer_id', 'listener_id', 'protocol', 'lb_algorithm',
             'session_persistence', 'tls_enabled', 'tls_container_ref',
             'ca_tls_container_ref', 'crl_container_ref', 'tls_ciphers',
             'tls_versions', 'alpn_protocols', 'tags'},
    'member': {'id', 'name', 'admin_state_up', 'project_id', 'address',
               'protocol_port', 'weight', 'backup', 'subnet_id',
               'monitor_address', 'monitor_port', 'tags'},
    'healthmonitor': {'id', 'name', 'admin_state_up', 'project_id',
                      'pool_id', 'type', 'delay', 'timeout', 'max_retries',
                      'max_retries_down', 'http_method', 'url_path',
                      'expected_codes', 'http_version', 'domain_name',
                      'tags'},
    'l7policy': {'id', 'name', 'description', 'admin_state_up',
                 'project_id', 'listener_id', 'action', 'position',
                 'redirect_pool_id', 'redirect_url', 'redirect_prefix',
                 'redirect_http_code', 'tags'},
    'l7rule': {'id', 'admin_state_up', 'project_id', 'type',
               'compare_type', 'key', 'value', 'invert', 'tags'},
}

# MARK tags the load balancers this provider made in flowlb, so that the
# provider agent tells them from those flowlb's own API made (by users or
# kube-controller) when it deletes what Octavia does not have: the
# orphans of a create Octavia rolled back after flowlb took it.
MARK = 'flowlb:octavia'


def marked(tags):
    """tags with MARK added (once)."""
    tags = list(tags or [])
    return tags if MARK in tags else tags + [MARK]


# Attributes that are fixed once created: an update leaves them out.
_FIXED = {'id', 'project_id', 'loadbalancer_id', 'listener_id', 'pool_id',
          'protocol', 'protocol_port', 'address', 'subnet_id', 'type',
          'vip_address', 'vip_port_id', 'vip_subnet_id', 'vip_network_id',
          'additional_vips'}


def unsupported(msg):
    """The refusal Octavia answers with 501 and msg."""
    return exceptions.UnsupportedOptionError(
        user_fault_string=msg, operator_fault_string=msg)


def _attrs(kind, obj):
    """The set attributes of a provider model object as a dict (Unset
    left out), its id attribute renamed id."""
    if isinstance(obj, data_models.BaseDataModel):
        d = {k: v for k, v in vars(obj).items()
             if not k.startswith('_') and
             not isinstance(v, data_models.UnsetType)}
    else:
        d = {k: v for k, v in obj.items()
             if not isinstance(v, data_models.UnsetType)}
    if ID_KEYS[kind] in d:
        d['id'] = d.pop(ID_KEYS[kind])
    return d


def check_metadata(what, meta):
    if meta:
        raise unsupported('flowlb takes no %s metadata (given: %s)' % (
            what, ', '.join(sorted(meta))))


def body(kind, obj, nested=False, update=False):
    """flowlb's API body for a create (or, update=True, an update) of a
    kind from its provider model object; nested: inside a load
    balancer's fully populated create."""
    d = _attrs(kind, obj)
    if kind == 'loadbalancer':
        check_metadata('flavor', d.get('flavor'))
        check_metadata('availability zone', d.get('availability_zone'))
    # An L7 rule's type may change; a health monitor's may not.
    fixed = _FIXED - {'type'} if kind == 'l7rule' else _FIXED
    out = {}
    for k, v in d.items():
        if k in _DROPPED[kind]:
            continue
        if nested and k in _PARENTS:
            continue
        if update and k in fixed:
            continue
        if k not in _ACCEPTED[kind]:
            if v is None or v == [] or v == {}:
                continue
            raise unsupported('flowlb does not take %s %s' % (kind, k))
        if v is None and not update:
            # Octavia gives None for an attribute the user left out;
            # flowlb applies its own default, as Octavia's API does.
            continue
        if k == 'additional_vips':
            v = [{a: x for a, x in av.items()
                  if a in ('subnet_id', 'ip_address', 'port_id') and x}
                 for av in v]
        out[k] = v
    if kind == 'loadbalancer' and (not update or 'tags' in out):
        # A user's new tags replace the old ones: the mark stays.
        out['tags'] = marked(out.get('tags'))
    return out


def loadbalancer_tree(lb):
    """The body of flowlb's fully populated create of a provider model
    load balancer: listeners, pools with their members and health
    monitors, L7 policies and rules, each with Octavia's id. A pool is
    defined once under "pools", named by its id (flowlb's graph create
    refers to pools by name), and referred to by that name from the
    listeners' default_pool and the policies' redirect_pool."""
    out = body('loadbalancer', lb)
    pools = {}
    for p in _list(getattr(lb, 'pools', None)):
        pools[_id('pool', p)] = p
    listeners = []
    for li in _list(getattr(lb, 'listeners', None)):
        lbody = body('listener', li, nested=True)
        dp = _get(li, 'default_pool')
        if dp:
            pools.setdefault(_id('pool', dp), dp)
            lbody.pop('default_pool_id', None)
            lbody['default_pool'] = {'name': _id('pool', dp)}
        elif lbody.get('default_pool_id'):
            lbody['default_pool'] = {'name': lbody.pop('default_pool_id')}
        policies = []
        for pol in _list(_get(li, 'l7policies')):
            pb = body('l7policy', pol, nested=True)
            if pb.get('redirect_pool_id'):
                pb['redirect_pool'] = {'name': pb.pop('redirect_pool_id')}
            pb['rules'] = [body('l7rule', r, nested=True)
                           for r in _list(_get(pol, 'rules'))]
            policies.append(pb)
        if policies:
            lbody['l7policies'] = policies
        listeners.append(lbody)
    poolbodies = []
    for pid, p in pools.items():
        pb = body('pool', p, nested=True)
        pb['name'] = pid
        hm = _get(p, 'healthmonitor')
        if hm:
            pb['healthmonitor'] = body('healthmonitor', hm, nested=True)
        pb['members'] = [body('member', m, nested=True)
                         for m in _list(_get(p, 'members'))]
        poolbodies.append(pb)
    if listeners:
        out['listeners'] = listeners
    if poolbodies:
        out['pools'] = poolbodies
    return out


def objects_of(lb):
    """The objects of a provider model load balancer, as Octavia hands it
    to a delete (listeners with their L7 policies and rules, pools with
    their members and health monitors): {(kind, id): None}, the before
    of a status report."""
    out = {('loadbalancer', _id('loadbalancer', lb)): None}
    for li in _list(_get(lb, 'listeners')):
        out[('listener', _id('listener', li))] = None
        for pol in _list(_get(li, 'l7policies')):
            out[('l7policy', _id('l7policy', pol))] = None
            for r in _list(_get(pol, 'rules')):
                out[('l7rule', _id('l7rule', r))] = None
    for p in _list(_get(lb, 'pools')):
        out[('pool', _id('pool', p))] = None
        for m in _list(_get(p, 'members')):
            out[('member', _id('member', m))] = None
        hm = _get(p, 'healthmonitor')
        if hm:
            out[('healthmonitor', _id('healthmonitor', hm))] = None
    return out


def _get(obj, attr):
    v = obj.get(attr) if isinstance(obj, dict) else getattr(obj, attr, None)
    return None if isinstance(v, data_models.UnsetType) else v


def _list(v):
    return [] if v is None or isinstance(v, data_models.UnsetType) else v


def _id(kind, obj):
    return _get(obj, ID_KEYS[kind])


def vip_ports_request(lb_id, project_id, vip, additional):
    """The body of flowlb's POST /v2/flowlb/vip_ports from what
    create_vip_port is given (octavia-lib's VIP dictionary and additional
    VIP dictionaries)."""
    body = {'loadbalancer_id': lb_id, 'project_id': project_id}
    for k in ('vip_subnet_id', 'vip_network_id', 'vip_address'):
        if vip.get(k):
            body[k] = vip[k]
    body['additional_vips'] = [
        {k: av[k] for k in ('subnet_id', 'ip_address') if av.get(k)}
        for av in additional or ()]
    return body


def vip_ports_answer(got):
    """flowlb's answer as create_vip_port returns it: the VIP dictionary
    (not Octavia's to delete) and the additional VIPs."""
    vip = {k: got[k] for k in ('vip_port_id', 'vip_address',
                               'vip_subnet_id', 'vip_network_id')}
    vip['octavia_owned'] = False
    additional = [{k: av[k] for k in ('subnet_id', 'ip_address', 'port_id',
                                      'network_id')}
                  for av in got.get('additional_vips') or ()]
    return vip, additional
