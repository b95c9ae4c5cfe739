#!/usr/bin/env bash
# The demo: a flowlb server driven by the real openstack CLI, from an empty
# database to a load balancer with listener, pool, members and monitor, its
# status tree, and a cascade delete. (The multi-node lab demo with traffic
# replaces this once the agents land.)
set -euo pipefail
exec "$(dirname "$0")/../test/compat/openstack-cli.sh" "${1:-bin/flowlb}"
