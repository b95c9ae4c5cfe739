"""Unit tests of the flowlb provider driver: no Octavia, no flowlb.

Run from deploy/octavia-provider: /usr/bin/python3 -m unittest
"""

import unittest

from octavia_lib.api.drivers import data_models as dm
from octavia_lib.api.drivers import exceptions

from flowlb_octavia import client
from flowlb_octavia import driver
from flowlb_octavia import status
from flowlb_octavia import translate

LB, LI, POOL, POOL2, MEM, HM = ('lb-1', 'li-1', 'pool-1', 'pool-2',
                                'mem-1', 'hm-1')

# Every object of full_lb() reported DELETED, as provisioning() reads it.
FULL_LB_DELETED = {('loadbalancers', LB): 'DELETED',
                   ('listeners', LI): 'DELETED',
                   ('pools', POOL): 'DELETED',
                   ('pools', POOL2): 'DELETED',
                   ('members', MEM): 'DELETED',
                   ('healthmonitors', HM): 'DELETED'}


def provisioning(rep):
    """A report's provisioning statuses: {(report key, id): status}."""
    return {(k, e['id']): e['provisioning_status']
            for k, es in rep.items() for e in es}


def full_lb():
    """A fully populated load balancer as Octavia hands it over: one
    listener whose default pool has a member and a monitor, and a pool
    no listener uses."""
    member = dm.Member(member_id=MEM, address='198.18.225.10',
                       protocol_port=8080, pool_id=POOL, weight=1,
                       name=None, subnet_id=None, project_id='p1')
    hm = dm.HealthMonitor(healthmonitor_id=HM, pool_id=POOL, type='TCP',
                          delay=5, timeout=3, max_retries=2, name=None,
                          project_id='p1')
    pool = dm.Pool(pool_id=POOL, name='web', protocol='TCP',
                   lb_algorithm='ROUND_ROBIN', loadbalancer_id=LB,
                   listener_id=LI, members=[member], healthmonitor=hm,
                   tls_container_data=None, project_id='p1')
    pool2 = dm.Pool(pool_id=POOL2, name='spare', protocol='UDP',
                    lb_algorithm='SOURCE_IP', loadbalancer_id=LB,
                    members=[], project_id='p1')
    listener = dm.Listener(listener_id=LI, loadbalancer_id=LB,
                           protocol='TCP', protocol_port=80,
                           default_pool=pool, default_pool_id=POOL,
                           sni_container_data=None, l7policies=[],
                           project_id='p1', description=None)
    return dm.LoadBalancer(loadbalancer_id=LB, name='lb', project_id='p1',
                           vip_address='198.18.225.5', vip_port_id='port-1',
                           vip_subnet_id='sub-1', vip_network_id='net-1',
                           vip_qos_policy_id=None, listeners=[listener],
                           pools=[pool, pool2], flavor={},
                           availability_zone={}, additional_vips=[])


class TranslateTest(unittest.TestCase):
    maxDiff = None

    def test_fully_populated(self):
        got = translate.loadbalancer_tree(full_lb())
        want = {
            'id': LB, 'name': 'lb', 'project_id': 'p1',
            'vip_address': '198.18.225.5', 'vip_port_id': 'port-1',
            'vip_subnet_id': 'sub-1', 'vip_network_id': 'net-1',
            'additional_vips': [], 'tags': ['flowlb:octavia'],
            'listeners': [{'id': LI, 'protocol': 'TCP', 'protocol_port': 80,
                           'default_pool': {'name': POOL}}],
            'pools': [
                {'id': POOL, 'name': POOL, 'protocol': 'TCP',
                 'lb_algorithm': 'ROUND_ROBIN',
                 'healthmonitor': {'id': HM, 'type': 'TCP', 'delay': 5,
                                   'timeout': 3, 'max_retries': 2},
                 'members': [{'id': MEM, 'address': '198.18.225.10',
                              'protocol_port': 8080, 'weight': 1}]},
                {'id': POOL2, 'name': POOL2, 'protocol': 'UDP',
                 'lb_algorithm': 'SOURCE_IP', 'members': []},
            ],
        }
        self.assertEqual(want, got)

    def test_child_create_keeps_parent(self):
        m = dm.Member(member_id=MEM, pool_id=POOL, address='198.18.225.10',
                      protocol_port=80, monitor_port=None)
        self.assertEqual({'id': MEM, 'address': '198.18.225.10',
                          'protocol_port': 80},
                         translate.body('member', m))
        li = dm.Listener(listener_id=LI, loadbalancer_id=LB, protocol='UDP',
                         protocol_port=53, default_pool_id=POOL)
        self.assertEqual({'id': LI, 'loadbalancer_id': LB, 'protocol': 'UDP',
                          'protocol_port': 53, 'default_pool_id': POOL},
                         translate.body('listener', li))

    def test_update_leaves_out_fixed_and_keeps_clears(self):
        new = dm.Listener(listener_id=LI, loadbalancer_id=LB, name='x',
                          description=None, connection_limit=10)
        self.assertEqual({'name': 'x', 'description': None,
                          'connection_limit': 10},
                         translate.body('listener', new, update=True))
        rule = dm.L7Rule(l7rule_id='r', l7policy_id='p', type='PATH',
                         value='/a')
        self.assertEqual({'type': 'PATH', 'value': '/a'},
                         translate.body('l7rule', rule, update=True))

    def test_load_balancer_marked(self):
        # A create carries the mark (octavia-lib 3.1's load balancer has
        # no tags; a dict with some stands for a later one's); an update
        # that gives new tags keeps it; one that gives none sends none.
        lb = dm.LoadBalancer(loadbalancer_id=LB, project_id='p1',
                             vip_subnet_id='sub-1')
        self.assertEqual(['flowlb:octavia'],
                         translate.body('loadbalancer', lb)['tags'])
        lb = {'loadbalancer_id': LB, 'tags': ['team-a']}
        self.assertEqual(['team-a', 'flowlb:octavia'],
                         translate.body('loadbalancer', lb)['tags'])
        for tags, want in [(['b'], ['b', 'flowlb:octavia']),
                           ([], ['flowlb:octavia']),
                           (None, ['flowlb:octavia']),
                           (['flowlb:octavia', 'c'], ['flowlb:octavia', 'c'])]:
            new = {'loadbalancer_id': LB, 'tags': tags}
            self.assertEqual({'tags': want},
                             translate.body('loadbalancer', new, update=True))
        new = dm.LoadBalancer(loadbalancer_id=LB, name='x')
        self.assertEqual({'name': 'x'},
                         translate.body('loadbalancer', new, update=True))

    def test_refusals(self):
        lb = full_lb()
        lb.flavor = {'compute_flavor': 'x'}
        with self.assertRaises(exceptions.UnsupportedOptionError) as e:
            translate.loadbalancer_tree(lb)
        self.assertIn('flavor', e.exception.user_fault_string)
        m = dm.Member(member_id=MEM, address='198.18.225.10',
                      protocol_port=80)
        m.request_sriov = True
        with self.assertRaises(exceptions.UnsupportedOptionError) as e:
            translate.body('member', m)
        self.assertIn('member request_sriov', e.exception.user_fault_string)


def tree(lb_status, listeners):
    return {'statuses': {'loadbalancer': {
        'id': LB, 'provisioning_status': lb_status,
        'operating_status': 'ONLINE', 'listeners': listeners}}}


def listener_tree(member_status='ACTIVE'):
    return [{'id': LI, 'provisioning_status': 'ACTIVE',
             'operating_status': 'ONLINE', 'pools': [{
                 'id': POOL, 'provisioning_status': 'ACTIVE',
                 'operating_status': 'ONLINE',
                 'health_monitor': {'id': HM, 'provisioning_status': 'ACTIVE',
                                    'operating_status': 'ONLINE'},
                 'members': [{'id': MEM, 'provisioning_status': member_status,
                              'operating_status': 'ONLINE'}]}]}]


class StatusTest(unittest.TestCase):
    def test_report_has_parents_and_deleted_children(self):
        before = status.objects(tree('ACTIVE', listener_tree()))
        after = status.objects(tree('ACTIVE', []))
        rep = status.report(after, before)
        self.assertEqual([{'id': LB, 'provisioning_status': 'ACTIVE',
                           'operating_status': 'ONLINE'}],
                         rep['loadbalancers'])
        for key, oid in (('listeners', LI), ('pools', POOL),
                         ('members', MEM), ('healthmonitors', HM)):
            self.assertEqual([{'id': oid, 'provisioning_status': 'DELETED'}],
                             rep[key], key)

    def test_cascade_deletes_everything(self):
        before = status.objects(tree('ACTIVE', listener_tree()), [
            {'pool': {'id': POOL2, 'provisioning_status': 'ACTIVE',
                      'operating_status': 'ONLINE'}, 'members': []}])
        rep = status.report(None, before)
        self.assertEqual(FULL_LB_DELETED, provisioning(rep))

    def test_settled(self):
        self.assertFalse(status.settled(tree('PENDING_UPDATE', [])))
        self.assertTrue(status.settled(tree('ERROR', [])))


class ObjectsOfTest(unittest.TestCase):
    def test_as_octavia_hands_a_delete_over(self):
        # Octavia's delete hands listeners and pools over as dicts.
        lb = dm.LoadBalancer.from_dict({
            'loadbalancer_id': LB,
            'listeners': [{'listener_id': LI, 'l7policies': [
                {'l7policy_id': 'pol-1', 'rules': [{'l7rule_id': 'r-1'}]}]}],
            'pools': [{'pool_id': POOL, 'members': [{'member_id': MEM}],
                       'healthmonitor': {'healthmonitor_id': HM}},
                      {'pool_id': POOL2, 'members': [],
                       'healthmonitor': None}]})
        self.assertEqual({('loadbalancer', LB): None,
                          ('listener', LI): None,
                          ('l7policy', 'pol-1'): None,
                          ('l7rule', 'r-1'): None,
                          ('pool', POOL): None,
                          ('member', MEM): None,
                          ('healthmonitor', HM): None,
                          ('pool', POOL2): None},
                         translate.objects_of(lb))

    def test_bare(self):
        self.assertEqual({('loadbalancer', LB): None}, translate.objects_of(
            dm.LoadBalancer(loadbalancer_id=LB)))


class ClientTest(unittest.TestCase):
    def test_ca_file_wins_over_the_environment(self):
        c = client.Client('https://flowlb:9876/', ca_file='/etc/flowlb-ca.crt')
        seen = {}

        class Resp:
            status_code, content, text = 404, b'{"faultstring": "gone"}', ''

            def json(self):
                return {'faultstring': 'gone'}

        def request(method, url, **kw):
            seen.update(kw, method=method, url=url)
            return Resp()
        c._http.request = request
        self.assertIsNone(c.get('/loadbalancers/x'))
        self.assertEqual('/etc/flowlb-ca.crt', seen['verify'])
        self.assertEqual('https://flowlb:9876/v2/lbaas/loadbalancers/x',
                         seen['url'])


class FakeFlowlb:
    """flowlb's API as the driver sees it: answers per (method, path),
    status trees in turn for the load balancer's status."""

    def __init__(self, trees, pools=(), fail=None):
        self.trees = list(trees)
        self.pools = list(pools)
        self.fail = fail
        self.calls = []
        self.answers = {}

    def call(self, method, path, body=None):
        self.calls.append((method, path, body))
        if self.fail and method != 'GET':
            raise client.FlowlbError(*self.fail)
        if (method, path) in self.answers:
            return self.answers[(method, path)]
        if path == '/loadbalancers/%s/status' % LB:
            t = self.trees[0] if len(self.trees) == 1 else self.trees.pop(0)
            if t is None:
                raise client.FlowlbError(404, 'not found')
            return t
        if path.startswith('/pools?loadbalancer_id='):
            return {'pools': self.pools}
        if path.endswith('/members'):
            return {'members': []}
        if path == '/pools/%s' % POOL:
            return {'pool': {'id': POOL, 'loadbalancers': [{'id': LB}]}}
        return {}

    def get(self, path):
        try:
            return self.call('GET', path)
        except client.FlowlbError as e:
            if e.code == 404:
                return None
            raise


class FakeLib:
    def __init__(self):
        self.reports = []

    def update_loadbalancer_status(self, s):
        self.reports.append(s)

    def __getattr__(self, name):
        if name.startswith('get_'):
            return lambda oid: {'id': oid}
        raise AttributeError(name)


class DriverTest(unittest.TestCase):
    def setUp(self):
        self._submit = driver._submit
        driver._submit = lambda fn, *args: fn(*args)
        self._sleep = driver.time.sleep
        driver.time.sleep = lambda s: None
        self.lib = FakeLib()

    def tearDown(self):
        driver._submit = self._submit
        driver.time.sleep = self._sleep
        driver.set_backends(None, None)

    def use(self, fake):
        driver.set_backends(fake, self.lib)

    def test_create_reports_the_tree_once_settled(self):
        fake = FakeFlowlb([tree('PENDING_CREATE', listener_tree('PENDING_CREATE')),
                           tree('ACTIVE', listener_tree())])
        self.use(fake)
        driver.FlowlbProviderDriver().loadbalancer_create(full_lb())
        method, path, body = fake.calls[0]
        self.assertEqual(('POST', '/loadbalancers'), (method, path))
        self.assertEqual(LB, body['loadbalancer']['id'])
        self.assertEqual(1, len(self.lib.reports))
        rep = self.lib.reports[0]
        self.assertEqual('ACTIVE', rep['members'][0]['provisioning_status'])
        self.assertEqual({LB}, {e['id'] for e in rep['loadbalancers']})
        self.assertEqual({LI}, {e['id'] for e in rep['listeners']})

    def test_a_failed_question_or_report_is_tried_again(self):
        # The driver agent's socket times out on a loaded machine; a
        # waiter that gave up left the load balancer PENDING_CREATE
        # until the agent's resynchronisation.
        class Flaky(FakeLib):
            def __init__(self):
                super().__init__()
                self.asked, self.tried = 0, 0

            def visible(self, kind, oid):
                self.asked += 1
                if self.asked == 1:
                    raise exceptions.DriverAgentTimeout()
                return self.asked > 2

            def update_loadbalancer_status(self, s):
                self.tried += 1
                if self.tried == 1:
                    raise exceptions.UpdateStatusError()
                super().update_loadbalancer_status(s)

        self.lib = Flaky()
        fake = FakeFlowlb([tree('ACTIVE', listener_tree())])
        self.use(fake)
        driver.FlowlbProviderDriver().loadbalancer_create(full_lb())
        self.assertEqual((3, 2), (self.lib.asked, self.lib.tried))
        self.assertEqual(1, len(self.lib.reports))
        self.assertEqual('ACTIVE',
                         self.lib.reports[0]['loadbalancers'][0][
                             'provisioning_status'])

    def test_report_waits_for_octavias_commit(self):
        # A report applied before Octavia's transaction commits is lost:
        # Octavia's repository reads the listener as ACTIVE, updates
        # nothing, and the change's PENDING_UPDATE then commits and
        # stays.
        class Committing(FakeLib):
            def __init__(self):
                super().__init__()
                self.asked = []

            def committed(self, lb_id):
                self.asked.append((lb_id, len(self.reports)))
                return len(self.asked) >= 3

        self.lib = Committing()
        self.use(FakeFlowlb([tree('ACTIVE', listener_tree())]))
        driver.FlowlbProviderDriver().listener_update(
            dm.Listener(listener_id=LI, loadbalancer_id=LB),
            dm.Listener(listener_id=LI, loadbalancer_id=LB, name='new'))
        self.assertEqual([(LB, 0)] * 3, self.lib.asked)
        self.assertEqual(1, len(self.lib.reports))
        self.assertEqual('ACTIVE', self.lib.reports[0]['listeners'][0][
            'provisioning_status'])

    def test_a_report_failing_past_the_deadline_is_given_up(self):
        class Refusing(FakeLib):
            def update_loadbalancer_status(self, s):
                raise exceptions.UpdateStatusError()

        clock = iter(range(0, 10 ** 6, 100))
        monotonic = driver.time.monotonic
        driver.time.monotonic = lambda: next(clock)
        try:
            self.lib = Refusing()
            self.use(FakeFlowlb([tree('ACTIVE', listener_tree())]))
            with self.assertLogs(driver.LOG.logger, 'ERROR'):
                driver.FlowlbProviderDriver().loadbalancer_create(full_lb())
        finally:
            driver.time.monotonic = monotonic

    def test_member_create_reports_it_and_its_parents_only(self):
        # Each object reported gets a new updated_at in Octavia; the
        # other member, the monitor and the pool without a listener are
        # no parents of the new member (octavia-tempest-plugin's list
        # tests compare their fields before and after).
        two = listener_tree()
        two[0]['pools'][0]['members'].append(
            {'id': 'mem-new', 'provisioning_status': 'ACTIVE',
             'operating_status': 'ONLINE'})
        fake = FakeFlowlb([tree('ACTIVE', two)])
        fake.pools = [{'id': POOL2, 'provisioning_status': 'ACTIVE',
                       'operating_status': 'ONLINE'}]
        self.use(fake)
        driver.FlowlbProviderDriver().member_create(
            dm.Member(member_id='mem-new', pool_id=POOL, address='198.18.5.5',
                      protocol_port=80))
        rep = self.lib.reports[0]
        got = {(k, e['id']) for k, es in rep.items() for e in es}
        self.assertEqual({('loadbalancers', LB), ('listeners', LI),
                          ('pools', POOL), ('members', 'mem-new')}, got)

    def test_member_delete_reports_parents_active(self):
        fake = FakeFlowlb([tree('ACTIVE', listener_tree()),
                           tree('PENDING_UPDATE', listener_tree('PENDING_DELETE')),
                           tree('ACTIVE', [dict(listener_tree()[0], pools=[
                               dict(listener_tree()[0]['pools'][0],
                                    members=[])])])])
        self.use(fake)
        driver.FlowlbProviderDriver().member_delete(
            dm.Member(member_id=MEM, pool_id=POOL))
        self.assertIn(('DELETE', '/pools/%s/members/%s' % (POOL, MEM), None),
                      fake.calls)
        rep = self.lib.reports[0]
        self.assertEqual([{'id': MEM, 'provisioning_status': 'DELETED'}],
                         rep['members'])
        for key in ('loadbalancers', 'listeners', 'pools'):
            self.assertEqual('ACTIVE', rep[key][0]['provisioning_status'])

    def test_cascade_delete_reports_every_child_deleted(self):
        fake = FakeFlowlb([tree('ACTIVE', listener_tree()), None])
        self.use(fake)
        driver.FlowlbProviderDriver().loadbalancer_delete(full_lb(),
                                                          cascade=True)
        self.assertIn(('DELETE', '/loadbalancers/%s?cascade=true' % LB, None),
                      fake.calls)
        rep = self.lib.reports[0]
        got = {e['provisioning_status'] for es in rep.values() for e in es}
        self.assertEqual({'DELETED'}, got)
        self.assertEqual({'loadbalancers', 'listeners', 'pools', 'members',
                          'healthmonitors'}, set(rep))

    def test_delete_of_what_flowlb_lacks_deletes_octavias_objects(self):
        # flowlb has no such load balancer (404 to the status and to the
        # delete): Octavia's objects, as handed over, are DELETED.
        fake = FakeFlowlb([None], fail=(404, 'no such load balancer'))
        self.use(fake)
        driver.FlowlbProviderDriver().loadbalancer_delete(full_lb(),
                                                          cascade=True)
        rep = self.lib.reports[0]
        self.assertEqual(FULL_LB_DELETED, provisioning(rep))

    def test_other_refusals_of_a_delete_stay_errors(self):
        self.use(FakeFlowlb([None], fail=(409, 'immutable')))
        with self.assertRaises(exceptions.DriverError):
            driver.FlowlbProviderDriver().loadbalancer_delete(full_lb())
        self.assertEqual([], self.lib.reports)

    def test_unsettled_change_is_reported_in_error(self):
        fake = FakeFlowlb([tree('PENDING_UPDATE', listener_tree())])
        self.use(fake)
        driver.CONF.set_override('settle_timeout', 0, group='flowlb')
        self.addCleanup(driver.CONF.clear_override, 'settle_timeout',
                        group='flowlb')
        driver.FlowlbProviderDriver().listener_update(
            dm.Listener(listener_id=LI, loadbalancer_id=LB),
            dm.Listener(listener_id=LI, name='x'))
        self.assertEqual([{'listeners': [{'id': LI,
                                          'provisioning_status': 'ERROR'}],
                           'loadbalancers': [{'id': LB,
                                              'provisioning_status': 'ACTIVE'}]}],
                         self.lib.reports)

    def test_refusals_of_flowlb_become_octavias(self):
        for code, exc in ((501, exceptions.UnsupportedOptionError),
                          (400, exceptions.UnsupportedOptionError),
                          (409, exceptions.DriverError)):
            self.use(FakeFlowlb([tree('ACTIVE', [])], fail=(code, 'no')))
            with self.assertRaises(exc) as e:
                driver.FlowlbProviderDriver().listener_create(
                    dm.Listener(listener_id=LI, loadbalancer_id=LB,
                                protocol='HTTPS', protocol_port=443))
            self.assertEqual('flowlb: no', e.exception.user_fault_string)
        self.assertEqual([], self.lib.reports)

    def test_refusal_reason_is_not_wrapped_twice(self):
        # Octavia answers "Provider 'flowlb' does not support a requested
        # option: " + the reason; flowlb's 501 already begins so.
        self.use(FakeFlowlb([tree('ACTIVE', [])], fail=(
            501, "Provider 'flow' does not support a requested option: "
                 "listener protocol HTTP")))
        with self.assertRaises(exceptions.UnsupportedOptionError) as e:
            driver.FlowlbProviderDriver().listener_create(
                dm.Listener(listener_id=LI, loadbalancer_id=LB,
                            protocol='HTTP', protocol_port=80))
        self.assertEqual('flowlb: listener protocol HTTP',
                         e.exception.user_fault_string)

    def test_member_batch_update(self):
        mem2, mem3 = 'mem-2', 'mem-3'
        after = listener_tree()
        after[0]['pools'][0]['members'] = [{
            'id': m, 'provisioning_status': 'ACTIVE',
            'operating_status': 'NO_MONITOR'} for m in (mem2, mem3)]
        fake = FakeFlowlb([tree('ACTIVE', listener_tree()),
                           tree('PENDING_UPDATE', listener_tree()),
                           tree('ACTIVE', after)])
        self.use(fake)
        waited = []
        self.lib.get_member = lambda oid: waited.append(oid) or {'id': oid}
        driver.FlowlbProviderDriver().member_batch_update(POOL, [
            dm.Member(member_id=m, pool_id=POOL, address=a,
                      protocol_port=8080)
            for m, a in ((mem2, '198.18.225.11'), (mem3, '198.18.225.12'))])
        self.assertIn(('PUT', '/pools/%s/members' % POOL, {'members': [
            {'id': mem2, 'address': '198.18.225.11', 'protocol_port': 8080},
            {'id': mem3, 'address': '198.18.225.12',
             'protocol_port': 8080}]}), fake.calls)
        self.assertEqual([mem2], waited, 'one new member asked for: '
                         'Octavia commits the list at once')
        rep = self.lib.reports[0]
        self.assertEqual({(MEM, 'DELETED'), (mem2, 'ACTIVE'),
                          (mem3, 'ACTIVE')},
                         {(e['id'], e['provisioning_status'])
                          for e in rep['members']})
        self.assertEqual('ACTIVE', rep['pools'][0]['provisioning_status'])

    def test_l7_rule_lineage(self):
        # A rule's change locks its policy, the policy's listener and the
        # load balancer: its report must settle all four.
        parents = {}
        status.objects(tree('ACTIVE', listener_tree()), (), [
            ('l7policy', {'id': 'pol', 'listener_id': LI,
                          'provisioning_status': 'ACTIVE'}),
            ('l7rule', {'id': 'rule', 'l7policy_id': 'pol',
                        'provisioning_status': 'ACTIVE'})], parents)
        self.assertEqual({('l7rule', 'rule'), ('l7policy', 'pol'),
                          ('listener', LI), ('loadbalancer', LB)},
                         status.lineage(parents, ('l7rule', 'rule')))

    def test_failover_is_not_implemented(self):
        d = driver.FlowlbProviderDriver()
        with self.assertRaises(exceptions.NotImplementedError):
            d.loadbalancer_failover(LB)

    def test_vip_port_octavias_unless_flowlb_makes_it(self):
        d = driver.FlowlbProviderDriver()
        # flowlb's 501: Octavia's network driver makes the port.
        fake = FakeFlowlb([], fail=(501, 'flowlb uses the VIP port'))
        self.use(fake)
        with self.assertRaises(exceptions.NotImplementedError):
            d.create_vip_port(LB, 'p1', {'vip_subnet_id': 's1'})
        self.assertEqual('/flowlb/vip_ports', fake.calls[0][1])
        # A port the user gave: Octavia's to take, flowlb not asked.
        fake = FakeFlowlb([])
        self.use(fake)
        with self.assertRaises(exceptions.NotImplementedError):
            d.create_vip_port(LB, 'p1', {'vip_port_id': 'user-port'})
        self.assertEqual([], fake.calls)
        # Another refusal is the caller's, in flowlb's words.
        self.use(FakeFlowlb([], fail=(400, 'Subnet s9 not found.')))
        with self.assertRaises(exceptions.UnsupportedOptionError):
            d.create_vip_port(LB, 'p1', {'vip_subnet_id': 's9'})

    def test_vip_port_made_by_flowlb(self):
        d = driver.FlowlbProviderDriver()
        fake = FakeFlowlb([])
        fake.answers[('POST', '/flowlb/vip_ports')] = {
            'vip_port_id': 'port-1', 'vip_address': '198.18.225.9',
            'vip_subnet_id': 's1', 'vip_network_id': 'n1',
            'additional_vips': [{'subnet_id': 's2', 'ip_address': '2001:2::9',
                                 'port_id': 'port-2', 'network_id': 'n1'}]}
        self.use(fake)
        vip, more = d.create_vip_port(
            LB, 'p1', {'vip_subnet_id': 's1', 'vip_network_id': 'n1',
                       'vip_address': None},
            [{'subnet_id': 's2', 'ip_address': None}])
        self.assertEqual(('POST', '/flowlb/vip_ports', {
            'loadbalancer_id': LB, 'project_id': 'p1',
            'vip_subnet_id': 's1', 'vip_network_id': 'n1',
            'additional_vips': [{'subnet_id': 's2'}]}), fake.calls[0])
        self.assertEqual({'vip_port_id': 'port-1',
                          'vip_address': '198.18.225.9',
                          'vip_subnet_id': 's1', 'vip_network_id': 'n1',
                          'octavia_owned': False}, vip)
        self.assertEqual([{'subnet_id': 's2', 'ip_address': '2001:2::9',
                           'port_id': 'port-2', 'network_id': 'n1'}], more)


if __name__ == '__main__':
    unittest.main()
