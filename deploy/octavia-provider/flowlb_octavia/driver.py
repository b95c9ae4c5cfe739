"""The provider driver: Octavia's calls forwarded to flowlb server.

Octavia instantiates the driver class on every API call, inside the
call's database transaction, so the class holds nothing: the flowlb
client, the driver library and the pool of status waiters live at module
level. Each call is one request to flowlb's own Octavia API with the
objects' Octavia ids (translate.py); flowlb answers at once with its
objects PENDING_*, and a waiter then follows that one load balancer until
flowlb settles it (every agent programmed it) and reports the statuses
of its whole tree to Octavia (status.py), with the driver agent's own
code in this process (inprocess.py).
"""

import logging as std_logging
import re
import threading
import time
from concurrent import futures

import requests
from oslo_config import cfg
from oslo_log import log as logging

from octavia_lib.api.drivers import driver_lib
from octavia_lib.api.drivers import exceptions
from octavia_lib.api.drivers import provider_base

from flowlb_octavia import client as flowlb_client
from flowlb_octavia import config
from flowlb_octavia import inprocess
from flowlb_octavia import status
from flowlb_octavia import translate

LOG = logging.getLogger(__name__)
CONF = config.register(cfg.CONF)

# Module-level state, shared by the short-lived driver instances.
_lock = threading.Lock()
_backends = {}
_executor = futures.ThreadPoolExecutor(max_workers=8,
                                       thread_name_prefix='flowlb-status')


_logging_lock_checked = False


def _submit(fn, *args):
    """Runs a status waiter in the background (tests run it inline)."""
    global _logging_lock_checked
    with _lock:
        if not _logging_lock_checked:
            _logging_lock_checked = True
            if native_logging_lock():
                LOG.info("logging's module lock was eventlet's in a process "
                         "whose threads are native: made a native one")
    return _executor.submit(fn, *args)


def _threads_patched():
    try:
        from eventlet import patcher
    except ImportError:
        return False
    return patcher.is_monkey_patched('thread')


def _green(lock):
    """Whether lock is eventlet's: eventlet.green.threading.RLock is
    the threading module's pure-Python RLock (its type's module says
    threading) around a lock of eventlet's own."""
    for t in (type(lock), type(getattr(lock, '_block', None))):
        if t.__module__.startswith('eventlet'):
            return True
    return False


def native_logging_lock(threads_patched=_threads_patched):
    """Gives the logging module a native lock again where oslo_log made
    it eventlet's, and says whether it did.

    oslo_log.setup swaps logging's module lock for a green RLock whenever
    eventlet has been imported, and Octavia's API process imports it
    without patching threads. The waiters here are native threads: one
    that waits for that lock while another thread holds it waits on
    eventlet's hub of the wrong thread and is never woken
    (greenlet.error: cannot switch to a different thread), and with it
    Octavia's request that was logging (a cascade delete hung so). Where
    threads are patched the green lock is right and is left. Called from
    the request's thread before the first waiter starts, holding the old
    lock while it is replaced, so that no thread is inside it then (one
    already waiting for it at that instant would release the new one;
    the window is once per process)."""
    old = std_logging._lock
    if old is None or not _green(old):
        return False
    if threads_patched():
        return False
    old.acquire()
    try:
        std_logging._lock = threading.RLock()
    finally:
        old.release()
    return True


def set_backends(flowlb=None, lib=None):
    """Replaces the flowlb client and the driver library (tests)."""
    with _lock:
        _backends['flowlb'] = flowlb
        _backends['lib'] = lib


def _flowlb():
    with _lock:
        c = _backends.get('flowlb')
        if c is None:
            o = CONF.flowlb
            session = None
            if o.auth_url:
                from keystoneauth1 import session as ks_session
                from keystoneauth1.identity import v3
                session = ks_session.Session(auth=v3.Password(
                    auth_url=o.auth_url, username=o.username,
                    password=o.password, project_name=o.project_name,
                    user_domain_name=o.user_domain_name,
                    project_domain_name=o.project_domain_name),
                    verify=o.ca_file or True)
            c = flowlb_client.Client(o.url, session, o.request_timeout,
                                     o.ca_file)
            _backends['flowlb'] = c
        return c


def _lib():
    """The driver library: done in this process inside Octavia
    (inprocess.py), octavia-lib's through the driver agent elsewhere."""
    with _lock:
        lib = _backends.get('lib')
        if lib is None:
            if inprocess.available():
                lib = inprocess.Library()
            else:
                da = CONF.driver_agent
                lib = driver_lib.DriverLibrary(
                    status_socket=da.status_socket_path,
                    stats_socket=da.stats_socket_path,
                    get_socket=da.get_socket_path)
            _backends['lib'] = lib
        return lib


# flowlb's own 501 text begins as Octavia's does; Octavia adds its own
# beginning to the reason a provider gives, so flowlb's is taken off.
_UNSUPPORTED_PREFIX = re.compile(
    r"^Provider '[^']*' does not support a requested option: ")


def _call(method, path, body=None, missing_ok=False):
    """One call to flowlb; its refusals become octavia-lib's: what flowlb
    cannot serve (501) or refuses as invalid (400) is an unsupported
    option with flowlb's words, anything else a driver error. missing_ok:
    flowlb's 404 answers None (a delete of what flowlb does not have is
    done)."""
    try:
        return _flowlb().call(method, path, body)
    except flowlb_client.FlowlbError as e:
        if missing_ok and e.code == 404:
            return None
        raise _refusal(e)
    except requests.RequestException as e:
        msg = 'flowlb server unreachable: %s' % e
        raise exceptions.DriverError(user_fault_string=msg,
                                     operator_fault_string=msg)


def _refusal(e):
    """flowlb's refusal e as octavia-lib's exception."""
    msg = 'flowlb: %s' % _UNSUPPORTED_PREFIX.sub('', e.message)
    if e.code in (400, 501):
        return translate.unsupported(msg)
    return exceptions.DriverError(user_fault_string=msg,
                                  operator_fault_string=str(e))


def _lb_of_pool(pool_id):
    p = _call('GET', '/pools/%s' % pool_id)['pool']
    return p['loadbalancers'][0]['id']


def _lb_of_listener(listener_id):
    li = _call('GET', '/listeners/%s' % listener_id)['listener']
    return li['loadbalancers'][0]['id']


def _lb_of_policy(policy_id):
    pol = _call('GET', '/l7policies/%s' % policy_id)['l7policy']
    return _lb_of_listener(pol['listener_id'])


def _objects(lb_id, extra_paths=(), parents=None):
    """The statuses of a load balancer's tree in flowlb (status.objects),
    None once it is gone. extra_paths: (kind, path, key) of objects the
    status tree does not show (L7 policies and rules)."""
    c = _flowlb()
    tree = c.get('/loadbalancers/%s/status' % lb_id)
    if tree is None:
        return None
    shown = set()
    for li in tree['statuses']['loadbalancer'].get('listeners') or []:
        shown.update(p['id'] for p in li.get('pools') or [])
    other = []
    pools = c.call('GET', '/pools?loadbalancer_id=%s' % lb_id)['pools']
    for p in pools:
        if p['id'] in shown:
            continue
        members = c.call('GET', '/pools/%s/members' % p['id'])['members']
        hm = None
        if p.get('healthmonitor_id'):
            got = c.get('/healthmonitors/%s' % p['healthmonitor_id'])
            hm = got and got['healthmonitor']
        other.append({'pool': p, 'members': members, 'healthmonitor': hm})
    extra = []
    for kind, path, key in extra_paths:
        got = c.get(path)
        if got is not None:
            extra.append((kind, got[key]))
    return status.objects(tree, other, extra, parents)


_GETTERS = {
    'loadbalancer': 'get_loadbalancer',
    'listener': 'get_listener',
    'pool': 'get_pool',
    'member': 'get_member',
    'healthmonitor': 'get_healthmonitor',
    'l7policy': 'get_l7policy',
    'l7rule': 'get_l7rule',
}


def _committed(lb_id):
    """Whether Octavia's transaction of the change has committed (None:
    the driver library cannot tell)."""
    lib = _lib()
    if hasattr(lib, 'committed'):
        return lib.committed(lb_id)
    return None


def _wait_committed(lb_id, deadline):
    """Waits until Octavia has committed the change's transaction: a
    report applied before it would be lost (inprocess.py). With the
    driver library, which cannot tell, a created object's visibility is
    what the waiter waits for."""
    delay = 0.05
    while True:
        done = _retried(deadline, 'is the change of load balancer %s '
                        'committed' % lb_id, _committed, lb_id)
        if done is None or done:
            return done is not None
        if time.monotonic() > deadline:
            raise TimeoutError('Octavia never committed the change of load '
                               'balancer %s' % lb_id)
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _visible(kind, oid):
    """Whether Octavia's database shows the object."""
    lib = _lib()
    if hasattr(lib, 'visible'):
        return lib.visible(kind, oid)
    return getattr(lib, _GETTERS[kind])(oid) is not None


def _retried(deadline, what, fn, *args):
    """fn(*args), tried again after a failure until the deadline: a
    waiter that gave up on a question or a report would leave its load
    balancer PENDING_* in Octavia until the provider agent's
    resynchronisation (the driver library's calls time out after 5 s on
    a loaded machine, a database call meets a deadlock)."""
    delay = 0.05
    while True:
        try:
            return fn(*args)
        except Exception as e:
            if time.monotonic() > deadline:
                raise
            LOG.warning('%s: %s; again in %.2f s', what, e, delay)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def _wait_visible(kind, oid, deadline):
    """Waits until Octavia's database shows a created object: the driver
    is called inside Octavia's transaction, and a status for a row not
    yet committed would be lost."""
    delay = 0.05
    while not _retried(deadline, 'is %s %s in Octavia' % (kind, oid),
                       _visible, kind, oid):
        if time.monotonic() > deadline:
            raise TimeoutError('%s %s never appeared in Octavia' % (kind, oid))
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _settle(lb_id, kind, oid, created, before, extra_paths, wait_for,
            before_parents=None, covers=()):
    """Waits for flowlb to settle the load balancer a change touched and
    reports it to Octavia (before: the tree before a delete, and
    before_parents its parents; wait_for: (kind, id) of objects the
    change may have created; covers: more (kind, id) the report names,
    a batch update's members)."""
    deadline = time.monotonic() + CONF.flowlb.settle_timeout
    try:
        c = _flowlb()
        delay = 0.05
        while True:
            tree = _retried(deadline, 'status of load balancer %s' % lb_id,
                            c.get, '/loadbalancers/%s/status' % lb_id)
            if tree is None or status.settled(tree):
                break
            if time.monotonic() > deadline:
                LOG.error('flowlb did not settle load balancer %s after a '
                          'change of %s %s', lb_id, kind, oid)
                _retried(deadline + 30, 'report of %s %s' % (kind, oid),
                         _lib().update_loadbalancer_status,
                         status.failed(kind, oid, lb_id))
                return
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        # Octavia commits its rows once the call returned, by the time
        # flowlb has programmed every node as a rule: asked only now,
        # Octavia's database is asked once. The change's own objects are
        # committed with the load balancer's PENDING_* status.
        if not _wait_committed(lb_id, deadline):
            if created:
                _wait_visible(kind, oid, deadline)
            for k, i in wait_for:
                _wait_visible(k, i, deadline)
        parents = {}
        now = None if tree is None else _retried(
            deadline, 'objects of load balancer %s' % lb_id,
            _objects, lb_id, extra_paths, parents)
        for k, v in (before_parents or {}).items():
            parents.setdefault(k, v)
        _retried(deadline, 'report of %s %s' % (kind, oid),
                 _lib().update_loadbalancer_status, status.report(
                     now, before, _scope(kind, oid, created, parents,
                                         covers)))
    except Exception:
        LOG.exception('status of %s %s (load balancer %s) not reported',
                      kind, oid, lb_id)


def _scope(kind, oid, created, parents, covers):
    """What a change's report covers (None: everything): the object and
    its ancestors, as Octavia locked them; a batch member update's
    members too; a created load balancer's whole tree (fully populated).
    parents: objects()'s, of the tree after the change and, for a
    deleted object, before it."""
    if kind == 'loadbalancer' and created:
        return None
    out = status.lineage(parents, (kind, oid))
    out.update(covers)
    return out


def _after(lb_id, kind, oid, created=False, before=None, extra_paths=(),
           wait_for=(), before_parents=None, covers=()):
    _submit(_settle, lb_id, kind, oid, created, before, tuple(extra_paths),
            tuple(wait_for), before_parents, tuple(covers))


def _l7_paths(policy_id, rule_id=None):
    if rule_id:
        return [('l7rule', '/l7policies/%s/rules/%s' % (policy_id, rule_id),
                 'rule')]
    paths = [('l7policy', '/l7policies/%s' % policy_id, 'l7policy')]
    got = _flowlb().get('/l7policies/%s/rules' % policy_id)
    for r in (got or {}).get('rules') or []:
        paths.append(('l7rule', '/l7policies/%s/rules/%s' % (
            policy_id, r['id']), 'rule'))
    return paths


class FlowlbProviderDriver(provider_base.ProviderDriver):
    def __init__(self):
        super().__init__()
        self.name = 'flowlb'

    # The VIP port: flowlb makes it when its VIPs must be made its own
    # way (flowlb server --neutron-vip-ports ovn: ports that OVN's load
    # balancers can serve), and deletes it with the load balancer;
    # otherwise (flowlb's 501) Octavia's network driver makes it
    # (octavia_owned, deleted by Octavia's status update when the load
    # balancer is reported DELETED). Either way flowlb takes it as the
    # create's vip_port_id. A port the user gave is the user's.
    def create_vip_port(self, loadbalancer_id, project_id, vip_dictionary,
                        additional_vip_dicts=None):
        msg = 'flowlb uses the VIP port Octavia makes'
        if vip_dictionary.get('vip_port_id'):
            raise exceptions.NotImplementedError(
                user_fault_string=msg, operator_fault_string=msg)
        body = translate.vip_ports_request(loadbalancer_id, project_id,
                                           vip_dictionary,
                                           additional_vip_dicts)
        try:
            got = _flowlb().call('POST', '/flowlb/vip_ports', body)
        except flowlb_client.FlowlbError as e:
            if e.code == 501:
                raise exceptions.NotImplementedError(
                    user_fault_string=msg, operator_fault_string=msg)
            raise _refusal(e)
        except requests.RequestException as e:
            msg = 'flowlb server unreachable: %s' % e
            raise exceptions.DriverError(user_fault_string=msg,
                                         operator_fault_string=msg)
        return translate.vip_ports_answer(got)

    # Load balancer
    def loadbalancer_create(self, loadbalancer):
        lb_id = loadbalancer.loadbalancer_id
        _call('POST', '/loadbalancers',
              {'loadbalancer': translate.loadbalancer_tree(loadbalancer)})
        _after(lb_id, 'loadbalancer', lb_id, created=True)

    def loadbalancer_delete(self, loadbalancer, cascade=False):
        lb_id = loadbalancer.loadbalancer_id
        # A load balancer flowlb does not have (the provider agent
        # reported it ERROR: flowlb lost it) is deleted in Octavia with
        # the objects Octavia hands over.
        before = _objects(lb_id) or translate.objects_of(loadbalancer)
        _call('DELETE', '/loadbalancers/%s%s' % (
            lb_id, '?cascade=true' if cascade else ''), missing_ok=True)
        _after(lb_id, 'loadbalancer', lb_id, before=before)

    def loadbalancer_failover(self, loadbalancer_id):
        msg = 'flowlb has no amphorae to fail over: every node serves ' \
              'every VIP'
        raise exceptions.NotImplementedError(user_fault_string=msg,
                                             operator_fault_string=msg)

    def loadbalancer_update(self, old_loadbalancer, new_loadbalancer):
        lb_id = old_loadbalancer.loadbalancer_id
        self._update('loadbalancer', new_loadbalancer, lb_id,
                     '/loadbalancers/%s' % lb_id, lb_id)

    def _update(self, kind, new, oid, path, lb_id, extra_paths=()):
        body = translate.body(kind, new, update=True)
        _call('PUT', path, {kind: body})
        _after(lb_id, kind, oid, extra_paths=extra_paths)

    def _delete(self, kind, oid, path, lb_id, extra_paths=()):
        parents = {}
        before = _objects(lb_id, extra_paths, parents)
        _call('DELETE', path)
        _after(lb_id, kind, oid, before=before, before_parents=parents)

    # Listener
    def listener_create(self, listener):
        _call('POST', '/listeners',
              {'listener': translate.body('listener', listener)})
        _after(listener.loadbalancer_id, 'listener', listener.listener_id,
               created=True)

    def listener_delete(self, listener):
        self._delete('listener', listener.listener_id,
                     '/listeners/%s' % listener.listener_id,
                     listener.loadbalancer_id)

    def listener_update(self, old_listener, new_listener):
        oid = old_listener.listener_id
        self._update('listener', new_listener, oid, '/listeners/%s' % oid,
                     old_listener.loadbalancer_id)

    # Pool
    def pool_create(self, pool):
        _call('POST', '/pools', {'pool': translate.body('pool', pool)})
        _after(pool.loadbalancer_id, 'pool', pool.pool_id, created=True)

    def pool_delete(self, pool):
        self._delete('pool', pool.pool_id, '/pools/%s' % pool.pool_id,
                     pool.loadbalancer_id)

    def pool_update(self, old_pool, new_pool):
        oid = old_pool.pool_id
        self._update('pool', new_pool, oid, '/pools/%s' % oid,
                     old_pool.loadbalancer_id)

    # Member
    def member_create(self, member):
        lb_id = _lb_of_pool(member.pool_id)
        _call('POST', '/pools/%s/members' % member.pool_id,
              {'member': translate.body('member', member)})
        _after(lb_id, 'member', member.member_id, created=True)

    def member_delete(self, member):
        self._delete('member', member.member_id, '/pools/%s/members/%s' % (
            member.pool_id, member.member_id), _lb_of_pool(member.pool_id))

    def member_update(self, old_member, new_member):
        oid = old_member.member_id
        self._update('member', new_member, oid, '/pools/%s/members/%s' % (
            old_member.pool_id, oid), _lb_of_pool(old_member.pool_id))

    def member_batch_update(self, pool_id, members):
        # Octavia hands over the pool's whole new list (the members an
        # additive_only update keeps included), new ones with their new
        # ids; flowlb's batch update matches on address and port as
        # Octavia's does and takes the ids of the new ones.
        lb_id = _lb_of_pool(pool_id)
        before = _objects(lb_id)
        _call('PUT', '/pools/%s/members' % pool_id, {'members': [
            translate.body('member', m) for m in members]})
        # Octavia commits the whole list in one transaction: one new
        # member visible, all are (a batch may hold thousands).
        new = [m.member_id for m in members
               if ('member', m.member_id) not in (before or {})]
        _after(lb_id, 'pool', pool_id, before=before,
               wait_for=[('member', new[0])] if new else [],
               covers=[('member', m.member_id) for m in members])

    # Health monitor
    def health_monitor_create(self, healthmonitor):
        lb_id = _lb_of_pool(healthmonitor.pool_id)
        _call('POST', '/healthmonitors', {'healthmonitor': translate.body(
            'healthmonitor', healthmonitor)})
        _after(lb_id, 'healthmonitor', healthmonitor.healthmonitor_id,
               created=True)

    def health_monitor_delete(self, healthmonitor):
        oid = healthmonitor.healthmonitor_id
        self._delete('healthmonitor', oid, '/healthmonitors/%s' % oid,
                     _lb_of_pool(healthmonitor.pool_id))

    def health_monitor_update(self, old_healthmonitor, new_healthmonitor):
        oid = old_healthmonitor.healthmonitor_id
        self._update('healthmonitor', new_healthmonitor, oid,
                     '/healthmonitors/%s' % oid,
                     _lb_of_pool(old_healthmonitor.pool_id))

    # L7 policy
    def l7policy_create(self, l7policy):
        lb_id = _lb_of_listener(l7policy.listener_id)
        _call('POST', '/l7policies',
              {'l7policy': translate.body('l7policy', l7policy)})
        _after(lb_id, 'l7policy', l7policy.l7policy_id, created=True,
               extra_paths=_l7_paths(l7policy.l7policy_id))

    def l7policy_delete(self, l7policy):
        oid = l7policy.l7policy_id
        self._delete('l7policy', oid, '/l7policies/%s' % oid,
                     _lb_of_listener(l7policy.listener_id),
                     _l7_paths(oid))

    def l7policy_update(self, old_l7policy, new_l7policy):
        oid = old_l7policy.l7policy_id
        self._update('l7policy', new_l7policy, oid, '/l7policies/%s' % oid,
                     _lb_of_listener(old_l7policy.listener_id),
                     _l7_paths(oid))

    # L7 rule
    def l7rule_create(self, l7rule):
        pid = l7rule.l7policy_id
        lb_id = _lb_of_policy(pid)
        _call('POST', '/l7policies/%s/rules' % pid,
              {'rule': translate.body('l7rule', l7rule)})
        _after(lb_id, 'l7rule', l7rule.l7rule_id, created=True,
               extra_paths=_l7_paths(pid, l7rule.l7rule_id))

    def l7rule_delete(self, l7rule):
        pid, oid = l7rule.l7policy_id, l7rule.l7rule_id
        self._delete('l7rule', oid, '/l7policies/%s/rules/%s' % (pid, oid),
                     _lb_of_policy(pid), _l7_paths(pid, oid))

    def l7rule_update(self, old_l7rule, new_l7rule):
        pid, oid = old_l7rule.l7policy_id, old_l7rule.l7rule_id
        body = translate.body('l7rule', new_l7rule, update=True)
        _call('PUT', '/l7policies/%s/rules/%s' % (pid, oid), {'rule': body})
        _after(_lb_of_policy(pid), 'l7rule', oid,
               extra_paths=_l7_paths(pid, oid))

    # Flavors and availability zones: flowlb takes no metadata.
    def get_supported_flavor_metadata(self):
        return {}

    def validate_flavor(self, flavor_metadata):
        translate.check_metadata('flavor', flavor_metadata)

    def get_supported_availability_zone_metadata(self):
        return {}

    def validate_availability_zone(self, availability_zone_metadata):
        translate.check_metadata('availability zone',
                                  availability_zone_metadata)
