#!/usr/bin/env bash
# Builds the Terraform OpenStack provider that test/compat's
# TestTerraformOpenStack runs against flowlb, from the
# github.com/terraform-provider-openstack/terraform-provider-openstack
# module served by the Go module proxy, and caches it in
#   ${FLOWLB_TF_PROVIDER_CACHE:-/var/cache/flowlb/terraform-provider-openstack}/<version>/
# as terraform-provider-openstack, the name Terraform's dev_overrides look
# for. A second run finds it there and returns at once. Prints the cache
# directory on the last line of standard output. Terraform itself is not
# built here (no Debian package; see docs/api-compatibility.md).
set -euo pipefail

name=terraform-provider-bins
version="${FLOWLB_TF_PROVIDER_VERSION:-v1.54.1}"
cache="${FLOWLB_TF_PROVIDER_CACHE:-/var/cache/flowlb/terraform-provider-openstack}/$version"
bin=terraform-provider-openstack
module=github.com/terraform-provider-openstack/terraform-provider-openstack
pkg=.
ldflags="-s -w"

# shellcheck source=lib/module-bin.sh
. "$(dirname "$0")/lib/module-bin.sh"
module_bin
