"""Unit tests of the provider agent: flowlb's feed to Octavia's reports,
with flowlb and the driver library played by fakes."""

import unittest
import urllib.parse

from octavia_lib.api.drivers import data_models as dm

from flowlb_octavia import agent
from flowlb_octavia import status


def obj(kind, oid, prov='ACTIVE', oper='ONLINE'):
    return {'kind': kind, 'id': oid, 'provisioning_status': prov,
            'operating_status': oper}


def octavia_lb(lb_id, members=('m1',), hm='hm1'):
    """Octavia's load balancer as the driver library answers it: a
    listener, its pool with members and a monitor."""
    pool = dm.Pool(pool_id='p1', members=[dm.Member(member_id=m)
                                          for m in members],
                   healthmonitor=dm.HealthMonitor(healthmonitor_id=hm)
                   if hm else None)
    return dm.LoadBalancer(loadbalancer_id=lb_id, listeners=[
        dm.Listener(listener_id='l1', l7policies=[])], pools=[pool])


def tree(lb_id, prov='ACTIVE', member_oper='ONLINE', members=('m1',)):
    objs = [obj('loadbalancer', lb_id, prov), obj('listener', 'l1', prov),
            obj('pool', 'p1', prov), obj('healthmonitor', 'hm1', prov)]
    objs += [obj('member', m, prov, member_oper) for m in members]
    return {'id': lb_id, 'gone': False, 'objects': objs}


class FakeFlowlb:
    """flowlb's feed routes: changes answers the queued feeds in turn;
    statuses answers the trees set now."""

    def __init__(self):
        self.feeds = []
        self.trees = {}
        self.stats = []
        self.asked = []

    def call(self, method, path, body=None):
        self.asked.append(path)
        route, _, query = path.partition('?')
        q = urllib.parse.parse_qs(query)
        if route == '/flowlb/changes':
            if self.feeds:
                return self.feeds.pop(0)
            return {'epoch': 'e', 'revision': int(q['after'][0]),
                    'full': False, 'more': False, 'loadbalancers': []}
        if route == '/flowlb/statuses':
            return {'loadbalancers': [
                self.trees.get(i, {'id': i, 'gone': True, 'objects': []})
                for i in q['id']]}
        if route == '/flowlb/statistics':
            return {'listeners': self.stats}
        raise AssertionError('unexpected call %s %s' % (method, path))


class FakeLib:
    def __init__(self, lbs):
        self.lbs = lbs
        self.reports = []
        self.stats = []

    def get_loadbalancer(self, lb_id):
        # As the library answers: a model built from the driver agent's
        # dict, its children dicts.
        lb = self.lbs.get(lb_id)
        if lb is None:
            return None
        return dm.LoadBalancer.from_dict(
            lb.to_dict(recurse=True, render_unsets=True))

    def update_loadbalancer_status(self, rep):
        self.reports.append(rep)

    def update_listener_statistics(self, rep):
        self.stats.append(rep)


class Opts:
    feed_wait = 20.0
    stats_interval = 10.0
    resync_interval = 60.0
    resync_grace = 30.0


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def statuses(rep, key):
    return {e['id']: (e['provisioning_status'], e.get('operating_status'))
            for e in rep.get(key, [])}


class AgentTest(unittest.TestCase):
    def setUp(self):
        self.flowlb = FakeFlowlb()
        self.lib = FakeLib({'lb1': octavia_lb('lb1')})
        self.clock = Clock()
        self.pending = []
        self.f = agent.Follower(self.flowlb, self.lib, Opts(),
                                pending_lbs=lambda since: self.pending,
                                clock=self.clock)

    def test_full_start_reports_octavia_load_balancers_only(self):
        # lb2 was made in flowlb directly: Octavia has no such load
        # balancer and hears nothing of it.
        self.flowlb.feeds.append({'epoch': 'e', 'revision': 7, 'full': True,
                                  'more': False, 'loadbalancers': [
                                      tree('lb1', member_oper='ERROR'),
                                      tree('lb2')]})
        self.f.follow(0)
        self.assertEqual(1, len(self.lib.reports))
        rep = self.lib.reports[0]
        self.assertEqual({'m1': ('ACTIVE', 'ERROR')},
                         statuses(rep, 'members'))
        self.assertEqual({'lb1': ('ACTIVE', 'ONLINE')},
                         statuses(rep, 'loadbalancers'))
        self.assertEqual(('e', 7), (self.f.epoch, self.f.revision))
        self.f.follow(0)
        self.assertIn('after=7', self.flowlb.asked[-1],
                      'the next read asks for what follows')

    def test_deleted_children_and_load_balancer(self):
        # Octavia still has m2, which flowlb deleted: DELETED.
        self.lib.lbs['lb1'] = octavia_lb('lb1', members=('m1', 'm2'))
        self.flowlb.feeds.append({'epoch': 'e', 'revision': 8, 'full': False,
                                  'more': False,
                                  'loadbalancers': [tree('lb1')]})
        self.f.follow(0)
        self.assertEqual({'m1': ('ACTIVE', 'ONLINE'), 'm2': ('DELETED', None)},
                         statuses(self.lib.reports[-1], 'members'))
        # The load balancer gone from flowlb: it and every object DELETED.
        self.flowlb.feeds.append({'epoch': 'e', 'revision': 9, 'full': False,
                                  'more': False, 'loadbalancers': [
                                      {'id': 'lb1', 'gone': True,
                                       'objects': []}]})
        self.f.follow(0)
        rep = self.lib.reports[-1]
        for key, ids in (('loadbalancers', {'lb1'}), ('listeners', {'l1'}),
                         ('pools', {'p1'}), ('members', {'m1', 'm2'}),
                         ('healthmonitors', {'hm1'})):
            self.assertEqual({i: ('DELETED', None) for i in ids},
                             statuses(rep, key), key)

    def test_pending_is_read_until_settled(self):
        self.flowlb.feeds.append({'epoch': 'e', 'revision': 3, 'full': False,
                                  'more': False, 'loadbalancers': [
                                      tree('lb1', prov='PENDING_UPDATE')]})
        self.f.follow(0)
        self.assertEqual([], self.lib.reports, 'a change in flight is '
                         'reported by its own waiter when it settles')
        self.assertIn('lb1', self.f.settling)
        # Still pending at the first read; settled at the second, which
        # comes after a longer delay.
        self.flowlb.trees['lb1'] = tree('lb1', prov='PENDING_UPDATE')
        self.clock.t += 0.2
        self.f.settle()
        self.assertEqual([], self.lib.reports)
        first_delay = self.f.settling['lb1'][1]
        self.flowlb.trees['lb1'] = tree('lb1')
        self.clock.t += first_delay / 2
        self.f.settle()
        self.assertEqual([], self.lib.reports, 'read before it was due')
        self.clock.t += first_delay
        self.f.settle()
        self.assertEqual({'lb1': ('ACTIVE', 'ONLINE')},
                         statuses(self.lib.reports[-1], 'loadbalancers'))
        self.assertNotIn('lb1', self.f.settling)

    def test_resync_reports_what_octavia_left_pending(self):
        self.pending = ['lb1', 'lb3']
        self.flowlb.trees['lb1'] = tree('lb1')
        # lb3: Octavia left it PENDING_DELETE and flowlb deleted it.
        self.lib.lbs['lb3'] = octavia_lb('lb3', members=(), hm=None)
        self.f.resync()
        by_lb = {}
        for rep in self.lib.reports:
            for e in rep['loadbalancers']:
                by_lb[e['id']] = e['provisioning_status']
        self.assertEqual({'lb1': 'ACTIVE', 'lb3': 'DELETED'}, by_lb)

    def test_statistics_changed_only(self):
        def li(lid, lb, n):
            return {'id': lid, 'loadbalancer_id': lb, 'bytes_in': n,
                    'bytes_out': 2 * n, 'active_connections': 1,
                    'total_connections': n, 'request_errors': 0}
        self.flowlb.stats = [li('l1', 'lb1', 5), li('l9', 'lb9', 7)]
        self.f.statistics()
        self.assertEqual([{'listeners': [
            {'id': 'l1', 'bytes_in': 5, 'bytes_out': 10,
             'active_connections': 1, 'total_connections': 5,
             'request_errors': 0}]}], self.lib.stats,
            "lb9 is no Octavia load balancer: its listener's counters "
            "stay out of Octavia's database")
        self.f.statistics()
        self.assertEqual(1, len(self.lib.stats), 'nothing changed')
        self.flowlb.stats = [li('l1', 'lb1', 6)]
        self.f.statistics()
        self.assertEqual(6, self.lib.stats[-1]['listeners'][0]['bytes_in'])

    def test_step_waits_until_the_next_due_work(self):
        self.f.step()  # statistics and resync are due at once
        self.assertIn('/flowlb/statistics', self.flowlb.asked)
        q = urllib.parse.parse_qs(self.flowlb.asked[-1].partition('?')[2])
        self.assertEqual('10.0', q['wait'][0],
                         'the log is followed until the statistics are due')


class OctaviaObjectsTest(unittest.TestCase):
    def test_driver_library_shape(self):
        # What DriverLibrary.get_loadbalancer answers: the load balancer a
        # model, its children the driver agent's dicts (to_dict with
        # render_unsets: unset attributes None).
        lb = dm.LoadBalancer.from_dict(
            octavia_lb('lb1').to_dict(recurse=True, render_unsets=True))
        self.assertIsInstance(lb.listeners[0], dict)
        self.assertEqual({('loadbalancer', 'lb1'), ('listener', 'l1'),
                          ('pool', 'p1'), ('member', 'm1'),
                          ('healthmonitor', 'hm1')},
                         status.octavia_objects(lb))
        lb = dm.LoadBalancer.from_dict(
            octavia_lb('lb1', members=(), hm=None).to_dict(
                recurse=True, render_unsets=True))
        self.assertEqual({('loadbalancer', 'lb1'), ('listener', 'l1'),
                          ('pool', 'p1')}, status.octavia_objects(lb))

    def test_unset_children(self):
        lb = dm.LoadBalancer(loadbalancer_id='lb1')
        self.assertEqual({('loadbalancer', 'lb1')},
                         status.octavia_objects(lb))
        self.assertIsNone(status.octavia_objects(None))

    def test_mirror_none_when_pending_or_foreign(self):
        self.assertIsNone(status.mirror(tree('lb1'), None))
        self.assertIsNone(status.mirror(tree('lb1', prov='PENDING_CREATE'),
                                        {('loadbalancer', 'lb1')}))


if __name__ == '__main__':
    unittest.main()
