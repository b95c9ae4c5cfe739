#!/usr/bin/env bash
# Runs every Go fuzz target for a while, one after the other.
#   hack/fuzz.sh [time per target, as go test -fuzztime takes it: 5s, 100s, 1000x]
# A crasher fails the run; Go writes its input to the package's
# testdata/fuzz/<Target>/, where it then runs with every go test as a
# regression test (commit it with the fix). Prints one line per target:
# its time, executions and verdict.
set -uo pipefail

per=${1:-5s}
GO=${GO:-go}
targets=(
	"./internal/server/octavia FuzzRequestBody"     # every Octavia body type, through the real handlers
	"./internal/server/octavia FuzzListQuery"       # list filters, sorting, paging, fields=
	"./internal/server/neutron FuzzNeutronBody"     # the Neutron subset's bodies
	"./internal/server/octavia FuzzDecode"          # request bodies: the one-pass decoder against the map validator
	"./internal/server/jsondoc FuzzEncode"          # answers: the fast encoder against encoding/json
	"./internal/server/compiler FuzzCompile"        # random trees -> flows, one owner per key
	"./internal/node/dataplane/nftables FuzzPlan" # the pure nftables planner
	"./internal/shared/flowpb FuzzUpdate"           # the agent protocol decoder
	"./internal/node/l7proxy FuzzParseRequest"      # the lean HTTP/1.1 parser against net/http's
)

# deadline_race: the run failed only because -fuzztime's deadline reached
# a worker mid-input, which Go before 1.27 reports as the target failing
# ("context deadline exceeded", go.dev/issue/75804). A crash, a failed
# check or a hang always writes its input ("Failing input written to"):
# that, or any other failure line, still fails the run.
deadline_race() {
	! grep -q 'Failing input written to' "$1" &&
		[ "$(grep -c -- '^--- FAIL' "$1")" = 1 ] &&
		[ "$(grep -A1 -- '^--- FAIL' "$1" | tail -1 | tr -d '[:space:]')" = "contextdeadlineexceeded" ]
}

failed=0
start=$(date +%s)
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	log=$(mktemp)
	t0=$(date +%s)
	if $GO test -run '^$' -fuzz "^${name}\$" -fuzztime "$per" "$pkg" >"$log" 2>&1; then
		verdict=ok
	elif deadline_race "$log"; then
		verdict="ok (no crash; Go's fuzz coordinator raced its own deadline, go.dev/issue/75804)"
	else
		verdict=FAIL
		failed=1
		cat "$log"
	fi
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
	printf '%-30s %-16s %4ss  execs %-10s %s\n' "$pkg" "$name" "$(($(date +%s) - t0))" "${execs:-0}" "$verdict"
	rm -f "$log"
done
echo "fuzz: ${#targets[@]} targets, $per each, $(($(date +%s) - start))s in all: $([ $failed = 0 ] && echo no crash || echo FAILED)"
exit $failed
