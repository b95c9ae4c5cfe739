"""Unit tests of the provider agent: flowlb's feed to Octavia's reports,
with flowlb and the driver library played by fakes."""

import datetime
import types
import unittest
import urllib.parse

from flowlb_octavia import agent
from flowlb_octavia import status


def obj(kind, oid, prov='ACTIVE', oper='ONLINE'):
    return {'kind': kind, 'id': oid, 'provisioning_status': prov,
            'operating_status': oper}


NOW = datetime.datetime(2026, 11, 30, 12, 0, 0)


def octavia_lb(lb_id, members=('m1',), hm='hm1', prov='ACTIVE',
               member_oper='ONLINE'):
    """Octavia's load balancer as its repositories answer it: a listener,
    its pool with members and a monitor."""
    def o(oid, p=prov, oper='ONLINE', **kw):
        return types.SimpleNamespace(id=oid, provisioning_status=p,
                                     operating_status=oper, **kw)
    pool = o('p1', members=[o(m, oper=member_oper) for m in members],
             health_monitor=o(hm) if hm else None)
    return o(lb_id, listeners=[o('l1', l7policies=[])], pools=[pool])


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
        # The load balancers the provider made: (id, created_at), served
        # two per page.
        self.marked = []
        self.deleted = []

    def call(self, method, path, body=None, ok=None):
        self.asked.append(path)
        route, _, query = path.partition('?')
        q = urllib.parse.parse_qs(query)
        if method == 'DELETE' and route.startswith('/loadbalancers/'):
            assert q['cascade'] == ['true'], path
            self.deleted.append(route.rpartition('/')[2])
            return None
        if route == '/loadbalancers':
            assert q['tags'] == ['flowlb:octavia'], path
            start = 0
            if 'marker' in q:
                start = [i for i, _ in self.marked].index(q['marker'][0]) + 1
            page = self.marked[start:start + 2]
            links = []
            if start + 2 < len(self.marked):
                links = [{'rel': 'next', 'href': 'https://flowlb/v2/lbaas/'
                          'loadbalancers?limit=2&marker=' + page[-1][0]}]
            return {'loadbalancers': [{'id': i, 'created_at': at}
                                      for i, at in page],
                    'loadbalancers_links': links}
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
    def __init__(self):
        self.reports = []
        self.stats = []

    def update_loadbalancer_status(self, rep):
        self.reports.append(rep)

    def update_listener_statistics(self, rep):
        self.stats.append(rep)


class FakeOctavia:
    """Octavia's database: load balancers, each with when its
    provisioning status last changed."""

    def __init__(self):
        self.lbs = {}

    def put(self, lb, since=NOW):
        self.lbs[lb.id] = (lb, since)

    def load_balancer(self, lb_id):
        lb, since = self.lbs.get(lb_id, (None, None))
        return status.octavia_statuses(lb), since

    def absent(self, ids):
        return [i for i in ids if i not in self.lbs or
                self.lbs[i][0].provisioning_status == 'DELETED']

    def pending(self, before):
        return [i for i, (lb, since) in self.lbs.items()
                if lb.provisioning_status in status.STALE_STATUSES and
                since < before]


class Opts:
    feed_wait = 20.0
    stats_interval = 10.0
    resync_interval = 60.0
    resync_grace = 30.0
    orphan_interval = 600.0
    orphan_grace = 600.0


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
        self.lib = FakeLib()
        self.octavia = FakeOctavia()
        self.octavia.put(octavia_lb('lb1'))
        self.clock = Clock()
        self.f = agent.Follower(self.flowlb, self.lib, Opts(), self.octavia,
                                clock=self.clock, utcnow=lambda: NOW)

    def feed(self, rev, *trees, full=False):
        self.flowlb.feeds.append({'epoch': 'e', 'revision': rev,
                                  'full': full, 'more': False,
                                  'loadbalancers': list(trees)})
        self.f.follow(0)

    def test_operating_statuses_that_differ_alone(self):
        # lb2 was made in flowlb directly: Octavia hears nothing of it.
        self.feed(7, tree('lb1', member_oper='ERROR'), tree('lb2'),
                  full=True)
        self.assertEqual([{'members': [{'id': 'm1',
                                        'operating_status': 'ERROR'}]}],
                         self.lib.reports,
                         'the member alone, and no provisioning status')
        self.assertEqual(('e', 7), (self.f.epoch, self.f.revision))
        self.f.follow(0)
        self.assertIn('after=7', self.flowlb.asked[-1],
                      'the next read asks for what follows')
        # Nothing differs: nothing reported.
        self.octavia.put(octavia_lb('lb1', member_oper='ERROR'))
        self.feed(8, tree('lb1', member_oper='ERROR'))
        self.assertEqual(1, len(self.lib.reports))

    def test_in_flight_left_to_the_waiter(self):
        # Octavia has the change in flight (PENDING_UPDATE, recent) and
        # flowlb has settled it: the waiter reports provisioning; the
        # agent only the operating status that differs.
        self.octavia.put(octavia_lb('lb1', members=('m1', 'm2'),
                                    prov='PENDING_UPDATE'),
                         since=NOW - datetime.timedelta(seconds=5))
        self.feed(8, tree('lb1', member_oper='ERROR'))
        self.assertEqual([{'members': [{'id': 'm1',
                                        'operating_status': 'ERROR'}]}],
                         self.lib.reports)

    def test_stale_reported_whole(self):
        # PENDING_UPDATE for longer than the grace: its waiter is gone.
        # Octavia still has m2, which flowlb deleted.
        self.octavia.put(octavia_lb('lb1', members=('m1', 'm2'),
                                    prov='PENDING_UPDATE'),
                         since=NOW - datetime.timedelta(seconds=31))
        self.feed(8, tree('lb1'))
        rep = self.lib.reports[-1]
        self.assertEqual({'m1': ('ACTIVE', 'ONLINE'),
                          'm2': ('DELETED', None)}, statuses(rep, 'members'))
        self.assertEqual({'lb1': ('ACTIVE', 'ONLINE')},
                         statuses(rep, 'loadbalancers'))

    def assertWholeTree(self, rep, prov):
        """rep gives every object of octavia_lb('lb1') prov, alone."""
        for key, ids in (('loadbalancers', {'lb1'}), ('listeners', {'l1'}),
                         ('pools', {'p1'}), ('members', {'m1'}),
                         ('healthmonitors', {'hm1'})):
            self.assertEqual({i: (prov, None) for i in ids},
                             statuses(rep, key), key)

    def test_stale_delete(self):
        # Gone from flowlb, PENDING_DELETE in Octavia since long: it and
        # every object DELETED.
        self.octavia.put(octavia_lb('lb1', prov='PENDING_DELETE'),
                         since=NOW - datetime.timedelta(minutes=5))
        self.feed(9, {'id': 'lb1', 'gone': True, 'objects': []})
        self.assertWholeTree(self.lib.reports[-1], 'DELETED')

    def test_stale_lost_is_error(self):
        # Gone from flowlb, but Octavia was creating it, not deleting it:
        # flowlb lost it. ERROR, not DELETED, for what is pending.
        self.octavia.put(octavia_lb('lb1', prov='PENDING_UPDATE'),
                         since=NOW - datetime.timedelta(minutes=5))
        self.feed(9, {'id': 'lb1', 'gone': True, 'objects': []})
        self.assertWholeTree(self.lib.reports[-1], 'ERROR')

    def test_lost_leaves_settled_objects(self):
        octavia = {('loadbalancer', 'lb1'): ('ERROR', 'OFFLINE'),
                   ('listener', 'l1'): ('ACTIVE', 'ONLINE')}
        self.assertIsNone(status.lost(octavia))
        octavia[('listener', 'l1')] = ('PENDING_CREATE', 'OFFLINE')
        self.assertEqual({'listeners': [{'id': 'l1',
                                         'provisioning_status': 'ERROR'}]},
                         status.lost(octavia))

    def test_pending_is_read_until_settled(self):
        self.feed(3, tree('lb1', prov='PENDING_UPDATE', member_oper='ERROR'))
        self.assertEqual([], self.lib.reports,
                         'nothing while flowlb has a change in flight')
        self.assertIn('lb1', self.f.settling)
        # Still pending at the first read; settled at the second, which
        # comes after a longer delay.
        self.flowlb.trees['lb1'] = tree('lb1', prov='PENDING_UPDATE')
        self.clock.t += 0.2
        self.f.settle()
        self.assertEqual([], self.lib.reports)
        first_delay = self.f.settling['lb1'][1]
        self.flowlb.trees['lb1'] = tree('lb1', member_oper='ERROR')
        self.clock.t += first_delay / 2
        self.f.settle()
        self.assertEqual([], self.lib.reports, 'read before it was due')
        self.clock.t += first_delay
        self.f.settle()
        self.assertEqual({'m1': (None, 'ERROR')},
                         {e['id']: (e.get('provisioning_status'),
                                    e['operating_status'])
                          for e in self.lib.reports[-1]['members']})
        self.assertNotIn('lb1', self.f.settling)

    def test_resync_reports_what_octavia_left_pending(self):
        old = NOW - datetime.timedelta(minutes=2)
        self.octavia.put(octavia_lb('lb1', prov='PENDING_UPDATE'), since=old)
        self.flowlb.trees['lb1'] = tree('lb1')
        # lb3: Octavia left it PENDING_DELETE and flowlb deleted it.
        self.octavia.put(octavia_lb('lb3', members=(), hm=None,
                                    prov='PENDING_DELETE'), since=old)
        # lb4: a change in flight, recent: left to its waiter.
        self.octavia.put(octavia_lb('lb4', prov='PENDING_UPDATE'))
        self.flowlb.trees['lb4'] = tree('lb4')
        self.f.resync()
        by_lb = {}
        for rep in self.lib.reports:
            for e in rep.get('loadbalancers', []):
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


    def test_orphans_swept(self):
        # lb1 is Octavia's; lbgone was rolled back by Octavia, lbdel
        # deleted there while flowlb kept it; lbnew is a create Octavia
        # has not committed yet (younger than the grace).
        self.octavia.put(octavia_lb('lbdel', prov='DELETED'))
        old, new = '2026-11-30T11:40:00.000000', '2026-11-30T11:55:00Z'
        self.flowlb.marked = [('lb1', old), ('lbgone', old),
                              ('lbnew', new), ('lbdel', old)]
        self.f.sweep()
        self.assertEqual(['lbgone', 'lbdel'], self.flowlb.deleted)
        self.assertEqual(2, sum(p.startswith('/loadbalancers?')
                                for p in self.flowlb.asked),
                         'both pages of the marked load balancers read')

    def test_sweep_due_every_orphan_interval(self):
        self.flowlb.marked = [('lbgone', '2026-11-30T11:00:00')]
        self.f.step()
        self.assertEqual(['lbgone'], self.flowlb.deleted)
        self.flowlb.deleted = []
        self.clock.t += 599
        self.f.step()
        self.assertEqual([], self.flowlb.deleted, 'not due yet')
        self.clock.t += 1
        self.f.step()
        self.assertEqual(['lbgone'], self.flowlb.deleted)


class OctaviaStatusesTest(unittest.TestCase):
    def test_tree(self):
        self.assertEqual({('loadbalancer', 'lb1'): ('ACTIVE', 'ONLINE'),
                          ('listener', 'l1'): ('ACTIVE', 'ONLINE'),
                          ('pool', 'p1'): ('ACTIVE', 'ONLINE'),
                          ('member', 'm1'): ('ACTIVE', 'ERROR'),
                          ('healthmonitor', 'hm1'): ('ACTIVE', 'ONLINE')},
                         status.octavia_statuses(
                             octavia_lb('lb1', member_oper='ERROR')))
        self.assertIsNone(status.octavia_statuses(None))
        self.assertIsNone(status.octavia_statuses(
            octavia_lb('lb1', prov='DELETED')))

    def test_mirror_none_when_pending_or_foreign(self):
        octavia = status.octavia_statuses(octavia_lb('lb1'))
        self.assertIsNone(status.mirror(tree('lb1'), None, False))
        self.assertIsNone(status.mirror(tree('lb1', prov='PENDING_CREATE'),
                                        octavia, True))
        self.assertIsNone(status.mirror(tree('lb1'), octavia, False),
                          'nothing differs')


if __name__ == '__main__':
    unittest.main()
