"""The provider agent: flowlb's statuses and statistics into Octavia.

Octavia's driver agent runs it (entry point ``flowlb`` in
``octavia.driver_agent.provider_agents``, enabled by ``[driver_agent]
enabled_provider_agents = flowlb``) in a process of its own, restarted
when it fails. It keeps Octavia's database in step with flowlb between
the changes the driver reports itself:

- **Operating statuses.** It follows flowlb's change log (GET
  /v2/flowlb/changes, a long poll): for each load balancer a change
  touched (a health verdict of flowlb's distributed monitors included)
  it reads Octavia's statuses of its objects and reports the operating
  statuses that differ. It starts with every load balancer, so that what
  changed while it was down is reported. Provisioning statuses are the
  change's status waiter's to report (status.mirror): the agent never
  takes a load balancer out of PENDING_* while its change is in flight.
- **Settling.** A load balancer the feed shows in PENDING_* is read again
  (GET /v2/flowlb/statuses) until flowlb settles it: a completion that
  changes no flow writes no log entry.
- **Resynchronisation.** A driver's status waiter lives in an octavia-api
  process; if that process ends, or the driver agent is down when the
  waiter reports, the change is never reported and the load balancer
  stays PENDING_* in Octavia. A load balancer Octavia has shown in
  PENDING_* or ERROR for longer than resync_grace is reported whole, as
  flowlb has it (objects flowlb no longer has DELETED; one flowlb lost,
  which Octavia was not deleting, ERROR): when the feed brings it, and
  every resync_interval for all such load balancers.
- **Reads.** Octavia's statuses are read from its database, read only,
  as the driver agent's own get calls read it: the driver library's get
  forks the driver agent's listener for each call.
- **Orphans.** Every orphan_interval, the load balancers this provider
  made in flowlb (tagged translate.MARK) that Octavia does not have, or
  has DELETED, and that are older than orphan_grace are deleted from
  flowlb (cascade): Octavia calls the provider inside its create's
  transaction, so a create it rolls back afterwards (its database
  failed, or the provider's answer came too late) leaves flowlb serving
  a VIP whose port Octavia deleted. flowlb's own load balancers (no
  mark) are never touched.
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

from flowlb_octavia import client
from flowlb_octavia import config
from flowlb_octavia import driver
from flowlb_octavia import status
from flowlb_octavia import translate

LOG = logging.getLogger(__name__)
CONF = config.register(cfg.CONF)

PENDING = status.PENDING


class OctaviaDB:
    """What the agent reads of Octavia's database, read only, as the
    driver agent's own get calls read it: through the driver library a
    read forks the driver agent's listener for each call, which a burst
    of changes cannot afford."""

    def __init__(self):
        from octavia.db import api as db_api
        from octavia.db import repositories

        self._session = db_api.get_session
        self._lbs = repositories.LoadBalancerRepository()

    def load_balancer(self, lb_id):
        """(statuses, since): the statuses of the load balancer's
        objects (status.octavia_statuses; None if Octavia has no such
        load balancer) and when its provisioning status last changed
        (UTC)."""
        lb = self._lbs.get(self._session(), id=lb_id)
        if lb is None:
            return None, None
        return status.octavia_statuses(lb), lb.updated_at or lb.created_at

    def absent(self, ids):
        """Those of ids that Octavia has no load balancer of, or only a
        DELETED one."""
        from octavia.db import models

        session = self._session()
        present = set()
        for i in range(0, len(ids), 500):
            rows = session.query(models.LoadBalancer.id).filter(
                models.LoadBalancer.id.in_(ids[i:i + 500]),
                models.LoadBalancer.provisioning_status != 'DELETED').all()
            present.update(r[0] for r in rows)
        return [i for i in ids if i not in present]

    def pending(self, since):
        """The ids of flowlb's load balancers in PENDING_* or ERROR since
        before since (UTC)."""
        session = self._session()
        out = []
        for st in status.STALE_STATUSES:
            lbs, _ = self._lbs.get_all(session, provider='flowlb',
                                       provisioning_status=st)
            out += [lb.id for lb in lbs
                    if (lb.updated_at or lb.created_at) < since]
        return out


class Follower:
    """The agent's state: its position in flowlb's log, the load balancers
    waiting to settle, and the statistics last reported.

    flowlb: a client.Client; lib: driver._lib() (the
    reports); octavia: an OctaviaDB (the reads)."""

    def __init__(self, flowlb, lib, opts, octavia, clock=time.monotonic,
                 utcnow=datetime.datetime.utcnow):
        self.flowlb = flowlb
        self.lib = lib
        self.opts = opts
        self.octavia_db = octavia
        self.clock = clock
        self.utcnow = utcnow
        self.epoch = ''
        self.revision = 0
        # Load balancers seen in PENDING_*: id -> (next read, delay).
        self.settling = {}
        # Which of flowlb's load balancers are Octavia's: id -> bool.
        self.octavia = {}
        self.last_stats = {}
        now = clock()
        self.next_stats = now
        self.next_resync = now
        self.next_sweep = now

    def grace(self):
        return datetime.timedelta(seconds=self.opts.resync_grace)

    def in_octavia(self, lb_id):
        """Octavia's statuses of a load balancer's objects (None if it
        has none) and whether they are stale (PENDING_* or ERROR for
        longer than resync_grace: the change's own report is lost)."""
        objs, since = self.octavia_db.load_balancer(lb_id)
        self.octavia[lb_id] = bool(objs)
        if not objs:
            return None, False
        prov = objs[('loadbalancer', lb_id)][0]
        stale = (prov in status.STALE_STATUSES and since is not None and
                 since < self.utcnow() - self.grace())
        return objs, stale

    def take(self, tree):
        """Reports one load balancer of the feed to Octavia as flowlb has
        it (status.mirror), or waits for flowlb to settle it."""
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
        in_octavia, stale = self.in_octavia(lb_id)
        if objs is None:
            self.octavia.pop(lb_id, None)
        rep = status.mirror(tree, in_octavia, stale)
        if rep:
            if stale:
                LOG.warning('load balancer %s was left %s in Octavia; '
                            'reporting it as flowlb has it', lb_id,
                            in_octavia[('loadbalancer', lb_id)][0])
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

    def statuses(self, ids):
        """flowlb's trees of the given load balancers, 100 per call."""
        out = []
        for i in range(0, len(ids), 100):
            got = self.flowlb.call('GET', '/flowlb/statuses?' +
                                   urllib.parse.urlencode(
                                       {'id': ids[i:i + 100]}, doseq=True))
            out += got['loadbalancers']
        return out

    def settle(self):
        """Reads again the load balancers due among those waiting to
        settle."""
        now = self.clock()
        due = [i for i, (at, _) in self.settling.items() if at <= now]
        for tree in self.statuses(due):
            _, delay = self.settling.get(tree['id'], (0, 0.1))
            self.take(tree)
            if tree['id'] in self.settling:
                delay = min(delay * 2, 2.0)
                self.settling[tree['id']] = (self.clock() + delay, delay)

    def resync(self):
        """Reports flowlb's state of the load balancers Octavia has shown
        in PENDING_* or ERROR for longer than resync_grace."""
        since = self.utcnow() - self.grace()
        ids = [i for i in self.octavia_db.pending(since)
               if i not in self.settling]
        for tree in self.statuses(ids):
            self.take(tree)

    def marked(self):
        """flowlb's load balancers this provider made: (id, created_at),
        page after page."""
        out, marker = [], None
        while True:
            q = [('tags', translate.MARK), ('fields', 'id'),
                 ('fields', 'created_at'), ('limit', '1000')]
            if marker:
                q.append(('marker', marker))
            got = self.flowlb.call(
                'GET', '/loadbalancers?' + urllib.parse.urlencode(q))
            out += [(lb['id'], lb.get('created_at'))
                    for lb in got.get('loadbalancers') or []]
            marker = None
            for link in got.get('loadbalancers_links') or []:
                if link.get('rel') == 'next':
                    query = urllib.parse.urlparse(link['href']).query
                    marker = (urllib.parse.parse_qs(query).get('marker') or
                              [None])[0]
            if not marker:
                return out

    def sweep(self):
        """Deletes from flowlb the load balancers this provider made that
        Octavia does not have (or has DELETED), older than
        orphan_grace."""
        cutoff = self.utcnow() - datetime.timedelta(
            seconds=self.opts.orphan_grace)
        old = [i for i, at in self.marked()
               if at and _parse_time(at) < cutoff]
        for lb_id in self.octavia_db.absent(old):
            LOG.warning('load balancer %s is in flowlb (made by this '
                        'provider) but not in Octavia: an orphan of a '
                        'create Octavia rolled back; deleting it from '
                        'flowlb', lb_id)
            try:
                self.flowlb.call('DELETE', '/loadbalancers/%s?cascade=true'
                                 % lb_id, ok=(202, 204, 404))
            except client.FlowlbError as e:
                # In flight (409) or refused: the next sweep tries again.
                LOG.warning('orphan %s not deleted yet: %s', lb_id, e)

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
        if now >= self.next_sweep:
            self.next_sweep = now + self.opts.orphan_interval
            self.sweep()
        due = [self.next_stats, self.next_resync, self.next_sweep]
        due += [at for at, _ in self.settling.values()]
        wait = min(self.opts.feed_wait, max(0.0, min(due) - self.clock()))
        while self.follow(wait):
            wait = 0


def _parse_time(s):
    """A time of flowlb's API (Octavia's format, UTC, with or without a
    Z or fraction) as a naive UTC datetime."""
    s = s.rstrip('Z')
    for fmt in ('%Y-%m-%dT%H:%M:%S.%f', '%Y-%m-%dT%H:%M:%S'):
        try:
            return datetime.datetime.strptime(s, fmt)
        except ValueError:
            pass
    raise ValueError('time %r' % s)


def main(exit_event):
    """The provider agent's entry point: runs until exit_event is set."""
    f = Follower(driver._flowlb(), driver._lib(), CONF.flowlb, OctaviaDB())
    LOG.info('flowlb provider agent following %s', CONF.flowlb.url)
    backoff = 1.0
    while not exit_event.is_set():
        try:
            f.step()
            backoff = 1.0
        except Exception as e:
            # flowlb unreachable or refusing, the driver agent's sockets
            # (the driver library's errors), Octavia's database: keep
            # going, with a backoff.
            LOG.warning('flowlb provider agent: %s; again in %.0f s',
                        e, backoff)
            exit_event.wait(backoff)
            backoff = min(backoff * 2, 30.0)
