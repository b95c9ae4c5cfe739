"""The provider agent: flowlb's statuses and statistics into Octavia.

Octavia's driver agent runs it (entry point ``flowlb`` in
``octavia.driver_agent.provider_agents``, enabled by ``[driver_agent]
enabled_provider_agents = flowlb``) in a process of its own, restarted
when it fails. It keeps Octavia's database in step with flowlb between
the changes the driver reports itself:

- **Operating statuses.** It follows flowlb's change log (GET
  /v2/flowlb/changes, a long poll): each load balancer a change touched,
  a health verdict of flowlb's distributed monitors included, is reported
  to Octavia with the statuses of all its objects, and the objects
  Octavia has and flowlb no longer has as DELETED. It starts with every
  load balancer, so that what changed while it was down is reported.
- **Settling.** A load balancer the feed shows in PENDING_* is read again
  (GET /v2/flowlb/statuses) until flowlb settles it: a completion that
  changes no flow writes no log entry.
- **Resynchronisation.** A driver's status waiter lives in an octavia-api
  process; if that process ends, the change it waited for is never
  reported and the load balancer stays PENDING_* in Octavia. Every
  resync_interval the agent asks Octavia's database (read only, as the
  driver agent itself does) for flowlb's load balancers in PENDING_*
  since longer than resync_grace, and reports each as flowlb has it.
- **Statistics.** Every stats_interval, each listener's counters summed
  over flowlb's nodes (GET /v2/flowlb/statistics), those that changed,
  as absolute values.

The logic is in flowlb (the feed) and in status.py (pure translations);
this module is the loop and its I/O.
"""

import datetime
import time
import urllib.parse

from oslo_config import cfg
from oslo_log import log as logging

from flowlb_octavia import config
from flowlb_octavia import driver
from flowlb_octavia import status

LOG = logging.getLogger(__name__)
CONF = config.register(cfg.CONF)

PENDING = status.PENDING


class Follower:
    """The agent's state: its position in flowlb's log, the load balancers
    waiting to settle, and the statistics last reported.

    flowlb: a client.Client; lib: octavia-lib's DriverLibrary; pending_lbs:
    a function answering the ids of Octavia's flowlb load balancers in
    PENDING_* since before a given time (None: no such reads)."""

    def __init__(self, flowlb, lib, opts, pending_lbs=None,
                 clock=time.monotonic):
        self.flowlb = flowlb
        self.lib = lib
        self.opts = opts
        self.pending_lbs = pending_lbs
        self.clock = clock
        self.epoch = ''
        self.revision = 0
        # Load balancers seen in PENDING_*: id -> (next read, delay).
        self.settling = {}
        # Octavia's load balancers among flowlb's: id -> bool.
        self.octavia = {}
        self.last_stats = {}
        now = clock()
        self.next_stats = now
        self.next_resync = now

    def in_octavia(self, lb_id, refresh=False):
        """Octavia's objects of a load balancer (status.octavia_objects),
        None if Octavia has no such load balancer."""
        objs = status.octavia_objects(self.lib.get_loadbalancer(lb_id))
        self.octavia[lb_id] = objs is not None
        return objs

    def take(self, tree):
        """Reports one load balancer of the feed to Octavia as flowlb has
        it, or waits for it to settle."""
        lb_id = tree['id']
        objs = status.feed_objects(tree)
        if objs is not None:
            prov = (objs.get(('loadbalancer', lb_id)) or (None,))[0]
            if prov in PENDING:
                if lb_id not in self.settling:
                    self.settling[lb_id] = (self.clock() + 0.1, 0.1)
                return
        self.settling.pop(lb_id, None)
        if objs is None and self.octavia.get(lb_id) is False:
            self.octavia.pop(lb_id, None)
            return
        rep = status.mirror(tree, self.in_octavia(lb_id))
        if objs is None:
            self.octavia.pop(lb_id, None)
        if rep:
            self.lib.update_loadbalancer_status(rep)

    def follow(self, wait):
        """One read of flowlb's log, waiting up to wait seconds for a
        change; reports what it brings."""
        q = {'epoch': self.epoch, 'after': self.revision,
             'wait': '%.1f' % max(0.0, wait)}
        feed = self.flowlb.call(
            'GET', '/flowlb/changes?' + urllib.parse.urlencode(q))
        for tree in feed['loadbalancers']:
            self.take(tree)
        self.epoch, self.revision = feed['epoch'], feed['revision']
        return feed.get('more', False)

    def settle(self):
        """Reads again the load balancers due among those waiting to
        settle."""
        now = self.clock()
        due = [i for i, (at, _) in self.settling.items() if at <= now]
        for i in range(0, len(due), 100):
            ids = due[i:i + 100]
            got = self.flowlb.call('GET', '/flowlb/statuses?' +
                                   urllib.parse.urlencode({'id': ids},
                                                          doseq=True))
            for tree in got['loadbalancers']:
                _, delay = self.settling.get(tree['id'], (0, 0.1))
                self.take(tree)
                if tree['id'] in self.settling:
                    delay = min(delay * 2, 2.0)
                    self.settling[tree['id']] = (self.clock() + delay, delay)

    def resync(self):
        """Reports flowlb's state of the load balancers Octavia has shown
        in PENDING_* for longer than resync_grace."""
        if self.pending_lbs is None:
            return
        since = datetime.datetime.utcnow() - datetime.timedelta(
            seconds=self.opts.resync_grace)
        ids = [i for i in self.pending_lbs(since) if i not in self.settling]
        for i in range(0, len(ids), 100):
            got = self.flowlb.call('GET', '/flowlb/statuses?' +
                                   urllib.parse.urlencode(
                                       {'id': ids[i:i + 100]}, doseq=True))
            for tree in got['loadbalancers']:
                objs = status.feed_objects(tree)
                if objs is None and self.octavia.get(tree['id']) is False:
                    continue
                LOG.warning('load balancer %s was left PENDING in Octavia; '
                            'reporting it as flowlb has it', tree['id'])
                self.take(tree)

    def statistics(self):
        got = self.flowlb.call('GET', '/flowlb/statistics')
        listeners = got['listeners']
        for li in listeners:
            if li['loadbalancer_id'] not in self.octavia:
                self.in_octavia(li['loadbalancer_id'])
        ours = {i for i, yes in self.octavia.items() if yes}
        rep = status.listener_statistics(listeners, ours, self.last_stats)
        if rep:
            self.lib.update_listener_statistics(rep)

    def step(self):
        """One turn of the loop: settle, resync and statistics when due,
        then follow the log until the next of them is due."""
        now = self.clock()
        if self.settling:
            self.settle()
        if now >= self.next_resync:
            self.next_resync = now + self.opts.resync_interval
            self.resync()
        if now >= self.next_stats:
            self.next_stats = now + self.opts.stats_interval
            self.statistics()
        due = [self.next_stats, self.next_resync]
        due += [at for at, _ in self.settling.values()]
        wait = min(self.opts.feed_wait, max(0.0, min(due) - self.clock()))
        while self.follow(wait):
            wait = 0


def _octavia_pending(since):
    """The ids of Octavia's flowlb load balancers in PENDING_* since
    before since (UTC), read from Octavia's database as the driver
    agent's own get calls read it."""
    from octavia.db import api as db_api
    from octavia.db import repositories

    repo = repositories.LoadBalancerRepository()
    session = db_api.get_session()
    out = []
    for st in PENDING:
        lbs, _ = repo.get_all(session, provider='flowlb',
                              provisioning_status=st)
        for lb in lbs:
            at = lb.updated_at or lb.created_at
            if at is None or at < since:
                out.append(lb.id)
    return out


def main(exit_event):
    """The provider agent's entry point: runs until exit_event is set."""
    f = Follower(driver._flowlb(), driver._lib(), CONF.flowlb,
                 pending_lbs=_octavia_pending)
    LOG.info('flowlb provider agent following %s', CONF.flowlb.url)
    backoff = 1.0
    while not exit_event.is_set():
        try:
            f.step()
            backoff = 1.0
        except Exception as e:
            # flowlb unreachable or refusing, the driver agent's sockets
            # (the driver library's errors): keep going, with a backoff.
            LOG.warning('flowlb provider agent: %s; again in %.0f s',
                        e, backoff)
            exit_event.wait(backoff)
            backoff = min(backoff * 2, 30.0)
