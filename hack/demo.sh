#!/usr/bin/env bash
# The demo (README's main job): a lab of network namespaces with a flowlb
# server and an agent per node, a load balancer created through the Octavia
# API, traffic from pods on two nodes through its VIP, the spread over the
# member pods, and a full teardown. Needs root.
set -euo pipefail
exec "${1:-bin/flowlb}" lab demo
