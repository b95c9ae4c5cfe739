#!/usr/bin/env bash
# Builds cloud-provider-openstack's octavia-ingress-controller, the
# unchanged client the end-to-end test TestOctaviaIngressController runs
# against flowlb's L7, from the k8s.io/cloud-provider-openstack module
# served by the Go module proxy, and caches it beside
# openstack-cloud-controller-manager (hack/cpo-bins.sh) in
#   ${FLOWLB_CPO_CACHE:-/var/cache/flowlb/cpo}/<version>/
# A second run finds it there and returns at once. Prints the cache
# directory on the last line of standard output.
set -euo pipefail

name=octavia-ingress-bins
version="${FLOWLB_CPO_VERSION:-v1.34.1}"
cache="${FLOWLB_CPO_CACHE:-/var/cache/flowlb/cpo}/$version"
bin=octavia-ingress-controller
module=k8s.io/cloud-provider-openstack
pkg="./cmd/$bin"
ldflags="-s -w -X $module/pkg/version.Version=$version"

# shellcheck source=lib/module-bin.sh
. "$(dirname "$0")/lib/module-bin.sh"
module_bin
