"""octavia-lib's driver library, done in the process the provider runs in.

The provider runs inside Octavia's own processes: the driver in each
octavia-api process, the agent in one the driver agent starts. Both have
Octavia's configuration and database. octavia-lib's DriverLibrary sends
each question and report over a socket to the driver agent, which forks
its listener for every one; the library then reads the answer's length
a byte at a time with a 10 ms sleep after each, and gives up after 5 s
without an answer. On a loaded machine a call took 0.7 to 1.6 s, two
per change, and a call that timed out left its load balancer PENDING_*
until the agent's resynchronisation. This class does the same work
where the provider already is: reports with the driver agent's own code
(DriverUpdater, as the forked listener runs it), and whether a change
has committed with a read of its load balancer's status.

A report must not reach Octavia's database before the change's own
transaction has committed: DriverUpdater reads a listener (and other
objects) before it updates it, sees the status from before the change
(ACTIVE), finds nothing to change, and the change's PENDING_UPDATE then
commits and stays. The driver waits for committed() first.
"""

import copy

from octavia_lib.api.drivers import exceptions
from octavia_lib.common import constants

def available():
    """Whether Octavia's own modules are here (they are inside Octavia's
    processes; the unit tests run without them)."""
    try:
        import octavia.api.drivers.driver_agent.driver_updater  # noqa: F401
        import octavia.db.models  # noqa: F401
    except ImportError:
        return False
    return True


class Library:
    """DriverLibrary's reports, and committed() in place of its get
    calls."""

    def __init__(self):
        from octavia.api.drivers.driver_agent import driver_updater
        from octavia.db import api as db_api
        from octavia.db import models

        self._updater = driver_updater.DriverUpdater
        self._session = db_api.get_session
        self._lb = models.LoadBalancer

    def committed(self, lb_id):
        """Whether Octavia's transaction of a change of the load
        balancer has committed: its provisioning status, read now, is
        PENDING_*. Octavia takes a change only of a load balancer that is
        not PENDING_*, sets it PENDING_* in the change's transaction and
        keeps it so until the change's report."""
        model = self._lb
        session = self._session()
        try:
            st = session.query(model.provisioning_status).filter(
                model.id == lb_id).scalar()
        finally:
            session.close()
        return st is not None and st.startswith('PENDING_')

    def _update(self, method, report):
        """The driver agent's answer to a report (DriverUpdater's, which
        takes the report apart: it gets a copy)."""
        # A DriverUpdater holds a session of its own: one per report, as
        # each forked listener of the driver agent has.
        u = self._updater()
        try:
            return getattr(u, method)(copy.deepcopy(report))
        finally:
            u.db_session.close()

    def update_loadbalancer_status(self, report):
        """As DriverLibrary's: UpdateStatusError if Octavia refused it."""
        got = self._update('update_loadbalancer_status', report)
        if got[constants.STATUS_CODE] != constants.DRVR_STATUS_CODE_OK:
            raise exceptions.UpdateStatusError(
                fault_string=got.get(constants.FAULT_STRING),
                status_object=got.get(constants.STATUS_OBJECT),
                status_object_id=got.get(constants.STATUS_OBJECT_ID))

    def update_listener_statistics(self, report):
        """As DriverLibrary's: UpdateStatisticsError if Octavia refused
        it."""
        got = self._update('update_listener_statistics', report)
        if got[constants.STATUS_CODE] != constants.DRVR_STATUS_CODE_OK:
            raise exceptions.UpdateStatisticsError(
                fault_string=got.get(constants.FAULT_STRING),
                stats_object=got.get(constants.STATS_OBJECT))
