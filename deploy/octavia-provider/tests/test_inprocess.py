"""inprocess.Library against Octavia's own models and DriverUpdater, on
a SQLite database of Octavia's schema (Debian's python3-octavia)."""

import os
import tempfile
import unittest
import warnings

from octavia_lib.api.drivers import exceptions

from flowlb_octavia import inprocess


@unittest.skipUnless(inprocess.available(), "Octavia's modules missing")
class LibraryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from oslo_config import cfg
        from oslo_db import options as db_options
        from octavia.db import api as db_api
        from octavia.db import base_models

        cls.dir = tempfile.TemporaryDirectory()
        db_options.set_defaults(cfg.CONF)
        cfg.CONF.set_override(
            'connection', 'sqlite:///' + os.path.join(cls.dir.name, 'o.db'),
            group='database')
        db_api._FACADE = None
        base_models.BASE.metadata.create_all(db_api.get_engine())
        cls.db_api = db_api
        # The lookup rows Octavia's migrations make, that the statuses
        # of a load balancer refer to.
        from octavia.db import models
        from sqlalchemy import exc
        s = db_api.get_session(autocommit=False)
        # Octavia's own models warn of their overlapping tag
        # relationships when first used: not this test's matter.
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', exc.SAWarning)
            for name in ('PENDING_CREATE', 'PENDING_UPDATE', 'ACTIVE',
                         'ERROR', 'DELETED'):
                s.add(models.ProvisioningStatus(name=name))
        for name in ('OFFLINE', 'ONLINE'):
            s.add(models.OperatingStatus(name=name))
        s.commit()
        s.close()

    @classmethod
    def tearDownClass(cls):
        from oslo_config import cfg
        cls.db_api._FACADE = None
        cfg.CONF.clear_override('connection', group='database')
        cls.dir.cleanup()

    def add_lb(self, lb_id, status):
        from octavia.db import models
        s = self.db_api.get_session(autocommit=False)
        s.add(models.LoadBalancer(
            id=lb_id, project_id='p1', provisioning_status=status,
            operating_status='OFFLINE', enabled=True, provider='flowlb'))
        s.commit()
        s.close()

    def provisioning(self, lb_id):
        from octavia.db import models
        s = self.db_api.get_session()
        try:
            return s.query(models.LoadBalancer.provisioning_status).filter(
                models.LoadBalancer.id == lb_id).scalar()
        finally:
            s.close()

    def test_committed_once_pending(self):
        lib = inprocess.Library()
        self.assertFalse(lib.committed('lb-d'))
        self.add_lb('lb-d', 'ACTIVE')
        self.assertFalse(lib.committed('lb-d'))
        self.add_lb('lb-e', 'PENDING_UPDATE')
        self.assertTrue(lib.committed('lb-e'))

    def test_report_sets_statuses_and_keeps_the_report(self):
        self.add_lb('lb-b', 'PENDING_CREATE')
        lib = inprocess.Library()
        rep = {'loadbalancers': [{'id': 'lb-b',
                                  'provisioning_status': 'ACTIVE',
                                  'operating_status': 'ONLINE'}]}
        lib.update_loadbalancer_status(rep)
        self.assertEqual('ACTIVE', self.provisioning('lb-b'))
        # DriverUpdater takes the report apart; a retry needs it whole.
        self.assertEqual('lb-b', rep['loadbalancers'][0]['id'])

    def test_refused_report_raises_as_the_driver_library_does(self):
        self.add_lb('lb-c', 'PENDING_CREATE')
        lib = inprocess.Library()
        with self.assertRaises(exceptions.UpdateStatusError):
            lib.update_loadbalancer_status({'loadbalancers': [
                {'id': 'lb-c', 'provisioning_status': 'NO_SUCH_STATUS'}]})
        self.assertEqual('PENDING_CREATE', self.provisioning('lb-c'))


if __name__ == '__main__':
    unittest.main()
