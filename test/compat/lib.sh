# Shared by the compatibility scripts: start a throwaway flowlb server on a
# free loopback port with its own data directory, and stop it on exit.
# Usage: . test/compat/lib.sh; start_server path/to/flowlb [extra flags]
# Sets FLOWLB_ENDPOINT and FLOWLB_TMP.

start_server() {
	local bin=$1
	shift
	FLOWLB_TMP=$(mktemp -d /tmp/flowlb-compat.XXXXXX)
	local port
	port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	FLOWLB_ENDPOINT="http://127.0.0.1:$port"
	"$bin" server --listen "127.0.0.1:$port" --agent-listen 127.0.0.1:0 --data-dir "$FLOWLB_TMP/data" "$@" >"$FLOWLB_TMP/server.log" 2>&1 &
	FLOWLB_PID=$!
	trap stop_server EXIT
	for _ in $(seq 1 100); do
		if curl -sf "$FLOWLB_ENDPOINT/healthcheck" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.1
	done
	echo "flowlb server did not start; its log:" >&2
	cat "$FLOWLB_TMP/server.log" >&2
	return 1
}

stop_server() {
	local rc=$?
	if [ -n "${FLOWLB_PID:-}" ]; then
		kill "$FLOWLB_PID" 2>/dev/null || true
		wait "$FLOWLB_PID" 2>/dev/null || true
	fi
	if [ $rc -ne 0 ] && [ -f "$FLOWLB_TMP/server.log" ]; then
		echo "--- flowlb server log (last 40 lines)" >&2
		tail -40 "$FLOWLB_TMP/server.log" >&2
	fi
	rm -rf "$FLOWLB_TMP"
	return $rc
}

# json_get EXPR: reads JSON on stdin and prints a Python expression of it (d).
json_get() {
	/usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"
}
