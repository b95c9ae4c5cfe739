#!/usr/bin/env bash
# Installs what flowlb's demo needs on a fresh Debian machine that has only
# Go, gcc and git; with --test, what the tests need too: the openstack CLI
# and the lab's Kubernetes control plane, built from source the first time
# (minutes); with --openstack, the real Neutron on OVN of `make openstack`
# (not part of `make test`), and the Kubernetes binaries and
# cloud-provider-openstack its CPO test runs. Idempotent: does nothing when all is present.
set -euo pipefail

test=false openstack=false
case "${1:-}" in
--test) test=true ;;
--openstack) openstack=true ;;
"") ;;
*) echo "usage: $0 [--test|--openstack]" >&2; exit 2 ;;
esac

packages=(
	postgresql            # the demo's --servers replicas; store tests start a throwaway cluster
	iproute2 nftables conntrack   # lab, data plane and their debugging
)
if $test; then
	packages+=(python3-openstackclient python3-octaviaclient)   # CLI compatibility test
	packages+=(systemd)   # systemd-analyze, -sysusers, -tmpfiles check deploy/systemd
	packages+=(chromium)  # the dashboard's browser test (test/e2e, through chromedp)
	packages+=(keystone uwsgi uwsgi-plugin-python3)   # the Keystone of TestCloudProviderOpenStack
	packages+=(barbican-api)   # the key manager of TestOctaviaIngressController (up in about 2 s)
	packages+=(clang llvm libbpf-dev)   # make generate-check rebuilds the eBPF data plane's objects
	packages+=(iptables)  # kube-proxy's iptables mode, a contender of the benchmark suite (smoke run in the tests)
	packages+=(haproxy)   # the amphora's proxy, beside the agents' L7 proxy in TestL7ProxyBench
	packages+=(frr)       # the lab router's BGP speaker and BFD (TestBGPWithFRR, TestBGPAggregation, TestRoutingTableWithFRR)
	# The real Octavia (no-op drivers) with its own MariaDB and RabbitMQ,
	# a contender of the benchmark suite (bench/lbaas, smoke run in the
	# tests); it starts them itself, in a temporary directory.
	packages+=(octavia-api octavia-worker mariadb-server rabbitmq-server)
	# The Octavia provider driver's unit tests (make unit-python) import
	# octavia-lib (octavia-api depends on it too; named for that test).
	packages+=(python3-octavia-lib)
	# Real Kubernetes nodes in the lab (docs/lab.md, "Real nodes"): a
	# containerd and runc per node, the CNI plugins, and debootstrap for
	# the root of the e2e tests' image (hack/test-images.sh).
	packages+=(containerd runc containernetworking-plugins debootstrap)
fi
if $openstack; then
	# A real Keystone and Neutron (ML2/OVN) on OVN with the userspace
	# datapath, the test bed of make openstack
	# (internal/lab/openstack); it starts every daemon itself, in
	# the lab.
	packages+=(keystone uwsgi uwsgi-plugin-python3 mariadb-server)
	packages+=(neutron-server ovn-central ovn-host openvswitch-switch ethtool iputils-arping)
	# Octavia's API and driver agent with flowlb's provider driver,
	# installed with pip into the test bed's directory.
	packages+=(octavia-api octavia-driver-agent python3-pip)
	# Barbican, the key manager Octavia reads TLS certificates from
	# (TestRealOctaviaBarbican), and its client library, which Octavia's
	# certificate manager uses.
	packages+=(barbican-api python3-barbicanclient)
	# ovn-octavia-provider beside flowlb's (TestRealOctaviaOVNProvider).
	packages+=(python3-ovn-octavia-provider)
	# octavia-tempest-plugin's API suite through that Octavia
	# (TestRealOctaviaTempest).
	packages+=(tempest octavia-tempest-plugin)
	# The openstack CLI through that Octavia (TestRealOctaviaClients).
	packages+=(python3-openstackclient python3-octaviaclient)
fi

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: need root to install: ${missing[*]}" >&2
		exit 1
	fi
	echo "install-deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=600 update -qq
	# policy-rc.d keeps Debian from starting the services it installs
	# (PostgreSQL's default cluster, MariaDB, RabbitMQ, Octavia): tests
	# start their own. Where the machine has none, one is in place for
	# the install only.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Go tools pinned in go.mod's tool block are fetched by the module proxy.
go mod download

# The lab's Kubernetes control plane: pinned binaries built once from the
# Go module proxy and cached outside the repository (about 12 minutes the
# first time), plus Debian's etcd and kubectl; and cloud-provider-openstack's
# controller manager and octavia-ingress-controller, built the same way,
# which TestCloudProviderOpenStack and TestOctaviaIngressController run
# against flowlb. The demo runs none of them.
if $test; then
	"$(dirname "$0")/kube-bins.sh" >/dev/null
	"$(dirname "$0")/cpo-bins.sh" >/dev/null
	"$(dirname "$0")/octavia-ingress-bins.sh" >/dev/null
	# CoreDNS for the real nodes' cluster DNS, and the images those
	# nodes import (agnhost's, pause, CoreDNS): no registry is reachable.
	"$(dirname "$0")/coredns-bins.sh" >/dev/null
	# Helm, which installs deploy/helm/flowlb in the tests (the chart
	# against the kustomize manifests, and on real nodes).
	"$(dirname "$0")/helm-bins.sh" >/dev/null
	"$(dirname "$0")/test-images.sh" >/dev/null
	# Debian unstable's nft beside the machine's, for TestNftCLIReadsTables
	# (seconds: binary packages, no build).
	"$(dirname "$0")/nft-bins.sh" >/dev/null
	# The Terraform OpenStack provider, only where a Terraform CLI is
	# installed (it has no Debian package): TestTerraformOpenStack skips
	# without one.
	if command -v terraform >/dev/null 2>&1; then
		"$(dirname "$0")/terraform-provider-bins.sh" >/dev/null
	fi
fi
# cloud-provider-openstack through the real Octavia (TestRealOctaviaCPO)
# on the lab's Kubernetes control plane and kube-proxy: the same cached
# builds as --test's.
if $openstack; then
	"$(dirname "$0")/kube-bins.sh" >/dev/null
	"$(dirname "$0")/cpo-bins.sh" >/dev/null
fi
# Terraform through the real Octavia (TestRealOctaviaClients) likewise.
if $openstack && command -v terraform >/dev/null 2>&1; then
	"$(dirname "$0")/terraform-provider-bins.sh" >/dev/null
fi
