#!/usr/bin/env bash
# Runs octavia-tempest-plugin's API tests against a real flowlb server
# behind a real Keystone, all on loopback, all from Debian's packages.
#
#   test/compat/tempest/run.sh [--full] [--regex RE] [--rbac advanced|keystone_default_roles] BIN
#
# Default: a subset (SUBSET below: every module, the TCP and UDP paths);
# --full: all of ^octavia_tempest_plugin.tests.api.v2 (about 3 minutes of
# tests). --rbac picks the persona set of both the server and the tests.
# Prints the counts by module and exits non-zero if a test failed.
# Everything it starts is stopped and its directory removed at exit
# (KEEP=1 keeps the directory: logs, results.csv).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
full=0 regex="" rbac=advanced
while [ $# -gt 1 ]; do
	case "$1" in
	--full) full=1 ;;
	--regex) regex="$2"; shift ;;
	--rbac) rbac="$2"; shift ;;
	*) break ;;
	esac
	shift
done
bin=$(realpath "${1:-bin/flowlb}")
py=/usr/bin/python3 # Debian's tools run on the system Python
export PATH="/usr/bin:$PATH"

# The CI subset: each module's create/show/list/update/delete and RBAC
# paths on the algorithms and protocols the flow provider serves.
SUBSET='^octavia_tempest_plugin\.tests\.api\.v2\.(test_load_balancer|test_provider|test_availability_zone|test_availability_zone_profile|test_flavor|test_flavor_profile|test_amphora|test_l7policy|test_l7rule)\.|^octavia_tempest_plugin\.tests\.api\.v2\.test_listener\..*test_(tcp|udp)_listener_|^octavia_tempest_plugin\.tests\.api\.v2\.(test_pool|test_member)\..*(TCP_RR|UDP_SI)_|^octavia_tempest_plugin\.tests\.api\.v2\.test_healthmonitor\..*test_(RR_TCP|SI_UDP)_'

packages=(keystone tempest octavia-tempest-plugin uwsgi uwsgi-plugin-python3 python3-openstackclient mariadb-server python3-pymysql)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "tempest: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# Keep Debian from starting Keystone's own service.
	policy=/usr/sbin/policy-rc.d had_policy=0
	[ -e $policy ] && had_policy=1
	[ $had_policy = 1 ] || { printf '#!/bin/sh\nexit 101\n' >$policy; chmod +x $policy; }
	apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		{ apt-get -o DPkg::Lock::Timeout=600 update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
	[ $had_policy = 1 ] || rm -f $policy
fi

work=$(mktemp -d /tmp/flowlb-tempest.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	sleep 1
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

ks_port=35357 api_port=19876 agent_port=19877 db_port=13306
ks="http://127.0.0.1:$ks_port"
api="http://127.0.0.1:$api_port"
mkdir -p "$work/log" "$work/fernet" "$work/cred"
cat >"$work/keystone.conf" <<CONF
[DEFAULT]
log_dir = $work/log
[database]
connection = mysql+pymysql://root@127.0.0.1:$db_port/keystone
[fernet_tokens]
key_repository = $work/fernet
[credential]
key_repository = $work/cred
[identity]
password_hash_rounds = 4
[token]
expiration = 14400
CONF
# Someone else on the port would be talked to instead: refuse.
if curl -sf "$ks/v3" >/dev/null; then echo "something already listens on $ks"; exit 1; fi
# Keystone's database: a private MariaDB on loopback. (SQLite fails
# Keystone's writes with "database is locked", even from one thread.)
echo "tempest: MariaDB on 127.0.0.1:$db_port"
mariadb-install-db --no-defaults --datadir="$work/db" --user=root --auth-root-authentication-method=normal >"$work/log/db-install.log" 2>&1
mariadbd --no-defaults --datadir="$work/db" --user=root --bind-address=127.0.0.1 --port=$db_port \
	--socket="$work/db.sock" --pid-file="$work/db.pid" --skip-name-resolve --innodb-flush-log-at-trx-commit=2 \
	--log-error="$work/log/mariadb.log" &
pids+=($!)
for _ in $(seq 100); do mariadb --no-defaults -h 127.0.0.1 -P $db_port -u root -e 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
mariadb --no-defaults -h 127.0.0.1 -P $db_port -u root -e 'CREATE DATABASE keystone'
km() { keystone-manage --config-file "$work/keystone.conf" "$@" >>"$work/log/manage.log" 2>&1; }
echo "tempest: bootstrapping Keystone on $ks"
km db_sync
km fernet_setup --keystone-user root --keystone-group root
km credential_setup --keystone-user root --keystone-group root
km bootstrap --bootstrap-password adminpw --bootstrap-region-id RegionOne \
	--bootstrap-admin-url "$ks/v3" --bootstrap-public-url "$ks/v3" --bootstrap-internal-url "$ks/v3"
# One request per connection, said in the response so that no client
# reuses it: uwsgi closing idle keep-alive connections races the clients'
# reuse of them (connection resets).
uwsgi --http-socket "127.0.0.1:$ks_port" --add-header "Connection: close" --plugin python3 --wsgi-file /usr/bin/keystone-wsgi-public \
	--master --die-on-term --lazy-apps --processes 2 --threads 4 --env "OS_KEYSTONE_CONFIG_FILES=$work/keystone.conf" \
	--logto "$work/log/uwsgi.log" &
pids+=($!)
for _ in $(seq 100); do curl -sf "$ks/v3" >/dev/null && break; sleep 0.2; done
curl -sf "$ks/v3" >/dev/null || { echo "Keystone did not start"; tail -20 "$work/log/"*; exit 1; }

export OS_AUTH_URL="$ks/v3" OS_USERNAME=admin OS_PASSWORD=adminpw OS_PROJECT_NAME=admin \
	OS_USER_DOMAIN_NAME=Default OS_PROJECT_DOMAIN_NAME=Default OS_IDENTITY_API_VERSION=3 OS_REGION_NAME=RegionOne
os() { /usr/bin/openstack "$@" >/dev/null; }
os project create --or-show service
os user create --or-show --password octaviapw octavia
os role add --project service --user octavia admin
for r in load-balancer_observer load-balancer_global_observer load-balancer_member load-balancer_quota_admin load-balancer_admin; do
	os role create --or-show "$r"
done
os service create --name octavia load-balancer
for i in public internal admin; do os endpoint create --region RegionOne load-balancer "$i" "$api"; done
unset OS_AUTH_URL OS_USERNAME OS_PASSWORD OS_PROJECT_NAME OS_USER_DOMAIN_NAME OS_PROJECT_DOMAIN_NAME OS_IDENTITY_API_VERSION OS_REGION_NAME

echo "tempest: starting flowlb on $api (Keystone auth, $rbac RBAC, noop network)"
"$bin" server --listen "127.0.0.1:$api_port" --agent-listen "127.0.0.1:$agent_port" --data-dir "$work/flowlb" \
	--auth keystone --keystone-url "$ks" --keystone-user octavia --keystone-password octaviapw --keystone-project service \
	--rbac "$rbac" --network noop --l7 --log-level warn 2>"$work/log/flowlb.log" &
pids+=($!)
for _ in $(seq 100); do curl -sf "$api/healthcheck" >/dev/null && break; sleep 0.1; done
providers=$(curl -sf -H "X-Auth-Token: $(curl -si -X POST "$ks/v3/auth/tokens" -H 'Content-Type: application/json' \
	-d '{"auth":{"identity":{"methods":["password"],"password":{"user":{"name":"admin","domain":{"name":"Default"},"password":"adminpw"}}},"scope":{"project":{"name":"admin","domain":{"name":"Default"}}}}}' |
	awk 'tolower($1)=="x-subject-token:" {print $2}' | tr -d '\r')" "$api/v2/lbaas/providers" |
	$py -c 'import json,sys; print(",".join("%s:%s" % (p["name"], p["description"]) for p in json.load(sys.stdin)["providers"]))')

# keystone_default_roles is Octavia's policy for scope-enforcing
# deployments: system-scoped admin and reader personas join the project
# ones, and a project's admin is only that project's member.
new_defaults=False scope=False
[ "$rbac" = keystone_default_roles ] && new_defaults=True scope=True

cd "$work"
# A private workspace registry: the default one (~/.tempest) refuses a
# second workspace of the same name.
tempest init --workspace-path "$work/workspace.yaml" --name "flowlb-$(basename "$work")" ws >/dev/null
cat >ws/etc/tempest.conf <<CONF
[DEFAULT]
log_dir = $work/log
[auth]
use_dynamic_credentials = True
admin_username = admin
admin_password = adminpw
admin_project_name = admin
admin_domain_name = Default
[identity]
uri_v3 = $ks/v3
auth_version = v3
region = RegionOne
[identity-feature-enabled]
api_v2 = False
api_v3 = True
[service_available]
load_balancer = True
neutron = False
nova = False
glance = False
cinder = False
swift = False
barbican = False
[network]
project_networks_reachable = True
[load_balancer]
test_with_noop = True
provider = flow
RBAC_test_type = $rbac
enabled_provider_drivers = $providers
# IPv6 VIPs and members are served: the suite then builds its shared load
# balancers on IPv6 VIPs and puts IPv4 and IPv6 members in their pools.
test_with_ipv6 = True
enforce_new_defaults = $new_defaults
build_interval = 0.2
build_timeout = 60
lb_build_interval = 0.2
lb_build_timeout = 60
check_interval = 0.2
check_timeout = 60
[enforce_scope]
octavia = $scope
CONF
cat "$here/features.conf" >>ws/etc/tempest.conf
re="$SUBSET"
[ $full = 1 ] && re='^octavia_tempest_plugin\.tests\.api\.v2'
[ -n "$regex" ] && re="$regex"
echo "tempest: running $re"
cd ws
start=$SECONDS
set +e
tempest run --regex "$re" --exclude-list "$here/exclude.txt" --concurrency 2 >"$work/log/run.txt" 2>&1
rc=$?
set -e
echo "tempest: $((SECONDS - start)) s"
stestr last --subunit 2>/dev/null | subunit2csv --no-passthrough 2>/dev/null >"$work/results.csv" || true
$py - "$work/results.csv" <<'PY'
import csv, collections, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = collections.defaultdict(collections.Counter)
for r in rows:
    tid = r["test"]
    if tid.startswith("setUpClass (") or tid.startswith("tearDownClass ("):
        tid = tid[tid.index("(") + 1:].rstrip(")") + ".class"
    if not tid.startswith("octavia_tempest_plugin"):
        continue
    mod = tid.split(".")[4]
    st = {"failure": "fail", "error": "fail", "xfail": "fail", "uxsuccess": "fail"}.get(r["status"], r["status"])
    by[mod][st] += 1
tot = collections.Counter()
print("%-40s %7s %7s %7s" % ("module", "success", "skip", "fail"))
for m in sorted(by):
    c = by[m]; tot.update(c)
    print("%-40s %7d %7d %7d" % (m, c["success"], c["skip"], c["fail"]))
print("%-40s %7d %7d %7d" % ("total", tot["success"], tot["skip"], tot["fail"]))
PY
if [ $rc -ne 0 ]; then
	grep -E "\.\.\. FAILED|Error: |MismatchError|Details:" "$work/log/run.txt" | head -80 || true
	echo "--- flowlb log"; tail -20 "$work/log/flowlb.log" || true
fi
exit $rc
