"""Debian's octavia-worker, with a native lock in the logging module.

oslo_log.setup gives logging a green module lock (eventlet's RLock)
whenever eventlet has been imported, and octavia-worker imports it
without patching threads while its RPC server runs each request in a
native thread. Two requests that want that lock at once (logging takes
it on a logger's first use) leave one waiting on eventlet's hub of the
wrong thread: greenlet.error: cannot switch to a different thread, and
that request never ends, so its load balancer stays PENDING_CREATE.
Where threads are not patched, a native lock is the right one; where
they are, the green lock is kept. Nothing else of the worker changes.
"""

import logging
import sys
import threading


def _threads_patched():
    try:
        from eventlet import patcher
    except ImportError:
        return False
    return patcher.is_monkey_patched('thread')


def native_lock_after_oslo_log():
    """Makes oslo_log's eventlet fix leave logging a native module lock
    where threads are not patched. Called before oslo_log.setup."""
    from oslo_log import log as oslo_log
    fix = oslo_log._fix_eventlet_logging

    def fix_then_native():
        fix()
        if not _threads_patched():
            logging._lock = threading.RLock()

    oslo_log._fix_eventlet_logging = fix_then_native


if __name__ == '__main__':
    native_lock_after_oslo_log()
    from octavia.cmd.octavia_worker import main
    sys.argv[0] = 'octavia-worker'
    sys.exit(main())
