"""The [flowlb] options in Octavia's configuration."""

from oslo_config import cfg

OPTS = [
    cfg.StrOpt('url', default='http://127.0.0.1:9876',
               help="flowlb server's Octavia API (without /v2)."),
    cfg.StrOpt('ca_file',
               help="CA bundle of flowlb's TLS certificate (unset: the "
                    "system's)."),
    cfg.IntOpt('request_timeout', default=30,
               help='Seconds to wait for one answer of flowlb.'),
    cfg.IntOpt('settle_timeout', default=300,
               help='Seconds to wait for a change to leave PENDING_* in '
                    'flowlb before it is reported in ERROR.'),
    cfg.FloatOpt('feed_wait', default=20.0, min=0.0, max=30.0,
                 help="Provider agent: seconds one read of flowlb's "
                      "change log waits for a change."),
    cfg.FloatOpt('stats_interval', default=10.0, min=1.0,
                 help='Provider agent: seconds between two reports of '
                      "the listeners' statistics."),
    cfg.FloatOpt('resync_interval', default=60.0, min=1.0,
                 help="Provider agent: seconds between two reads of "
                      "Octavia's flowlb load balancers left in "
                      "PENDING_*."),
    cfg.FloatOpt('resync_grace', default=30.0, min=0.0,
                 help='Provider agent: seconds a load balancer stays '
                      'PENDING_* in Octavia before the agent reports it '
                      'as flowlb has it (its own status waiter reports '
                      'it first).'),
    cfg.FloatOpt('orphan_interval', default=600.0, min=1.0,
                 help="Provider agent: seconds between two sweeps of "
                      "flowlb's load balancers this provider made that "
                      "Octavia does not have (or has DELETED)."),
    cfg.FloatOpt('orphan_grace', default=600.0, min=0.0,
                 help='Provider agent: the age (flowlb\'s created_at) '
                      'below which such a load balancer is never swept: '
                      "Octavia commits a create after the provider's "
                      'call returns; keep it above the longest create.'),
    cfg.StrOpt('auth_url',
               help="Keystone of flowlb's service user; unset: flowlb "
                    "runs with --auth noauth and is reached without "
                    "a token."),
    cfg.StrOpt('username'),
    cfg.StrOpt('password', secret=True),
    cfg.StrOpt('project_name', default='service'),
    cfg.StrOpt('user_domain_name', default='Default'),
    cfg.StrOpt('project_domain_name', default='Default'),
]

GROUP = 'flowlb'


def register(conf=cfg.CONF):
    conf.register_opts(OPTS, group=GROUP)
    return conf
