#!/usr/bin/env bash
# Drives the real `openstack loadbalancer` CLI (Debian's python3-octaviaclient)
# against a real flowlb server with noauth, through a full lifecycle; every
# step that changes something waits for ACTIVE. Fails on the first error.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "${1:-bin/flowlb}")
. "$here/lib.sh"

command -v /usr/bin/openstack >/dev/null || { echo "openstack CLI missing: run hack/install-deps.sh --test" >&2; exit 1; }
start_server "$bin"

# auth none: every service, Octavia and the Neutron look-ups, uses this endpoint.
os() { /usr/bin/openstack --os-auth-type none --os-endpoint "$FLOWLB_ENDPOINT" "$@"; }
step() { printf '\n== %s\n' "$*"; }

subnet=$(curl -sf "$FLOWLB_ENDPOINT/v2.0/subnets?name=flowlb-vip-subnet" | json_get 'd["subnets"][0]["id"]')

step "create a load balancer on subnet $subnet"
os loadbalancer create --name cli-lb --vip-subnet-id "$subnet" --wait -f json | tee "$FLOWLB_TMP/lb.json"
[ "$(json_get 'd["provisioning_status"]' <"$FLOWLB_TMP/lb.json")" = ACTIVE ]

step "listener"
os loadbalancer listener create --name cli-l --protocol TCP --protocol-port 80 --wait cli-lb -f value -c provisioning_status | grep -x ACTIVE

step "pool"
os loadbalancer pool create --name cli-p --listener cli-l --protocol TCP --lb-algorithm SOURCE_IP_PORT --wait -f value -c provisioning_status | grep -x ACTIVE

step "members"
os loadbalancer member create --name m1 --address 198.18.17.10 --protocol-port 8080 --wait cli-p -f value -c provisioning_status | grep -x ACTIVE
os loadbalancer member create --name m2 --address 198.18.18.10 --protocol-port 8080 --weight 5 --wait cli-p -f value -c provisioning_status | grep -x ACTIVE
[ "$(os loadbalancer member list cli-p -f value -c address | sort | tr '\n' ' ')" = "198.18.17.10 198.18.18.10 " ]

step "health monitor"
os loadbalancer healthmonitor create --name cli-hm --delay 5 --timeout 3 --max-retries 3 --type TCP --wait cli-p -f value -c provisioning_status | grep -x ACTIVE

step "member update"
os loadbalancer member set --weight 0 --wait cli-p m1
[ "$(os loadbalancer member show cli-p m1 -f value -c weight)" = 0 ]

step "status tree"
os loadbalancer status show cli-lb | tee "$FLOWLB_TMP/status.json"
json_get 'd["loadbalancer"]["listeners"][0]["pools"][0]["health_monitor"]["type"]' <"$FLOWLB_TMP/status.json" | grep -x TCP
[ "$(json_get 'len(d["loadbalancer"]["listeners"][0]["pools"][0]["members"])' <"$FLOWLB_TMP/status.json")" = 2 ]

step "stats"
os loadbalancer stats show cli-lb -f value -c total_connections | grep -x 0

step "refused features answer 501"
if out=$(os loadbalancer pool create --name bad --loadbalancer cli-lb --protocol HTTP --lb-algorithm ROUND_ROBIN 2>&1); then
	echo "an HTTP pool was accepted: $out" >&2
	exit 1
fi
echo "$out" | grep -q "does not support a requested option" || { echo "unexpected refusal: $out" >&2; exit 1; }

step "listener and pool updates (the CLI sends some integers as strings)"
os loadbalancer listener set --connection-limit 5 --allowed-cidr 198.18.0.0/16 --wait cli-l
[ "$(os loadbalancer listener show cli-l -f value -c connection_limit)" = 5 ]
os loadbalancer pool set --lb-algorithm SOURCE_IP --session-persistence type=SOURCE_IP --wait cli-p
[ "$(os loadbalancer pool show cli-p -f value -c lb_algorithm)" = SOURCE_IP ]

step "UDP listener, backup member"
os loadbalancer listener create --name cli-dns --protocol UDP --protocol-port 53 --wait cli-lb -f value -c provisioning_status | grep -x ACTIVE
os loadbalancer pool create --name cli-dns-p --listener cli-dns --protocol UDP --lb-algorithm SOURCE_IP_PORT --wait -f value -c provisioning_status | grep -x ACTIVE
os loadbalancer member create --address 198.18.19.10 --protocol-port 53 --enable-backup --wait cli-dns-p -f value -c backup | grep -x True
os loadbalancer healthmonitor create --delay 3 --timeout 2 --max-retries 2 --type UDP-CONNECT --wait cli-dns-p -f value -c type | grep -x UDP-CONNECT

step "flavor and availability zone"
os loadbalancer flavorprofile create --name cli-fp --provider flow --flavor-data '{}' -f value -c provider_name | grep -x flow
os loadbalancer flavor create --name cli-f --flavorprofile cli-fp --enable -f value -c name | grep -x cli-f
os loadbalancer availabilityzoneprofile create --name cli-azp --provider flow --availability-zone-data '{}' -f value -c name | grep -x cli-azp
os loadbalancer availabilityzone create --name cli-az --availabilityzoneprofile cli-azp -f value -c name | grep -x cli-az
os loadbalancer create --name cli-lb2 --vip-subnet-id "$subnet" --flavor cli-f --availability-zone cli-az --wait -f value -c provider | grep -x flow
if os loadbalancer flavor delete cli-f 2>/dev/null; then echo "a flavor in use was deleted" >&2; exit 1; fi
os loadbalancer delete --wait cli-lb2
os loadbalancer flavor delete cli-f
os loadbalancer availabilityzone delete cli-az

step "cascade delete"
os loadbalancer delete --cascade --wait cli-lb
[ -z "$(os loadbalancer list -f value -c id)" ]

echo
echo "openstack CLI compatibility: all steps passed"
