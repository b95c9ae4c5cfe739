"""driver.native_logging_lock: logging's module lock made native again
where oslo_log made it eventlet's in a process of native threads."""

import logging
import threading
import unittest

from flowlb_octavia import driver


class _GreenLock:
    """Stands in for eventlet's green RLock: only its module is read."""

    def __init__(self):
        self.held = 0
        self.acquired = 0

    def acquire(self, *args):
        self.held += 1
        self.acquired += 1
        return True

    def release(self):
        self.held -= 1


_GreenLock.__module__ = 'eventlet.green.threading'


class NativeLoggingLockTest(unittest.TestCase):
    def setUp(self):
        self.saved = logging._lock
        self.addCleanup(setattr, logging, '_lock', self.saved)

    def test_green_lock_in_native_threads_is_replaced(self):
        green = _GreenLock()
        logging._lock = green
        self.assertTrue(driver.native_logging_lock(lambda: False))
        self.assertIsNot(logging._lock, green)
        self.assertEqual(type(logging._lock), type(threading.RLock()))
        # Replaced while held, and the old one left free.
        self.assertEqual(green.acquired, 1)
        self.assertEqual(green.held, 0)
        # logging works with it, from several threads.
        log = logging.getLogger('flowlb-test-native-lock')

        def loggers():
            for i in range(50):
                logging.getLogger('flowlb-test-%d' % i)

        ts = [threading.Thread(target=loggers) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(5)
            self.assertFalse(t.is_alive())
        log.debug('still logs')

    def test_eventlets_green_rlock_is_replaced(self):
        # The lock oslo_log makes: eventlet.green.threading.RLock, whose
        # type is threading's pure-Python RLock around eventlet's lock.
        try:
            from eventlet.green import threading as green_threading
        except ImportError:
            self.skipTest('no eventlet')
        green = green_threading.RLock()
        logging._lock = green
        self.assertTrue(driver.native_logging_lock(lambda: False))
        self.assertEqual(type(logging._lock), type(threading.RLock()))
        self.assertTrue(green.acquire(blocking=False))
        green.release()

    def test_green_lock_with_patched_threads_is_left(self):
        green = _GreenLock()
        logging._lock = green
        self.assertFalse(driver.native_logging_lock(lambda: True))
        self.assertIs(logging._lock, green)
        self.assertEqual(green.acquired, 0)

    def test_native_lock_is_left(self):
        native = threading.RLock()
        logging._lock = native
        self.assertFalse(driver.native_logging_lock(lambda: False))
        self.assertIs(logging._lock, native)


if __name__ == '__main__':
    unittest.main()
