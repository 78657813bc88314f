#!/bin/sh
# SPDX-License-Identifier: MIT
# info-json: odpx-info --json is valid JSON, reports the values set through the
# environment as such (and the others as defaults), and lists every ODPX_
# variable the library and odpstat read; odpx(7) documents each of them too.
# BUILD names the build directory (default build).
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
B=$(cd "$src/${BUILD:-build}" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
cd "$src" || exit 1
for v in $(env | sed -n 's/^\(ODPX_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done

out=$(ODPX_WATCH_MAX=77 ODPX_REMOVE_QUARANTINE_MS=5 ODPX_LOG=info "$B/odpx-info" --json 2>/dev/null) ||
	fail "odpx-info --json exited $?"
# every variable read by getenv() or odpx_env(), a knob table row, or a counter root
read=$(grep -ohE '(getenv|odpx_env)\("ODPX_[A-Z_]+"|\{ "ODPX_[A-Z_]+"|"ODPX_[A-Z]+_ROOT"' \
	lib/*.c uffd/*.c sysfs-stats/*.c | grep -oE 'ODPX_[A-Z_]+' | sort -u)
[ -n "$read" ] || fail "found no ODPX_ variable in the sources"
echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
env = d["environment"]
def want(k, v, s):
    got = env[k]
    if got["value"] != v or got["source"] != s:
        sys.exit(f"FAIL: {k}: {got}, want value {v} from {s}")
want("ODPX_WATCH_MAX", "77", "environment")
want("ODPX_REMOVE_QUARANTINE_MS", "5", "environment")
want("ODPX_LOG", "info", "environment")
want("ODPX_MODE", "auto", "default")
for k in sys.argv[1:]:
    if k not in env:
        sys.exit(f"FAIL: {k} is read by odpx but odpx-info does not report it")
for s in ("limits", "userfaultfd", "io_uring", "rdma_devices"):
    if s not in d:
        sys.exit(f"FAIL: no {s} section")
if not isinstance(d["limits"]["max_pinned_bytes"], int):
    sys.exit("FAIL: limits.max_pinned_bytes is not a number")
print("odpx-info --json: %d variables, io_uring usable: %s, monitor mode: %s" %
      (len(env), d["io_uring"]["usable"], d["userfaultfd"].get("monitor_mode")))
' $read || exit 1
for v in $read; do
	grep -q "$v" docs/man/odpx.7 || fail "$v is not in odpx(7)"
done
"$B/odpx-info" >/dev/null || fail "odpx-info (text) exited $?"
echo "every variable odpx reads is reported and documented"
