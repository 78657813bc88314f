#!/bin/sh
# paging-quick: build/odpx-paging --quick writes a whole report.
#
# Every line of samples.ndjson is a JSON object (python3's json module reads
# it); the host experiments (pincache: both series; timeline: its four
# phases) have samples; every device experiment (warmup, prefetch, latency,
# workingset, phase) has samples or a "skipped" line with its reason; the
# latency rows, where they ran, are the ten of odpx-paging(1) with ordered
# percentiles and ratios against their reference; the sweep has its three
# modes; index.md names the host, kernel, device, mode and commit; every plot named in index.md exists and is a non-empty PNG file
# (its 8 magic bytes).  And bench/odpstat-plot draws a PNG from odpstat
# --json output.  Skips (77) only when gnuplot or python3 is absent.
here=$(cd "$(dirname "$0")" && pwd)
bin=${ODPX_BUILDDIR:-$here/../build}/odpx-paging

[ -x "$bin" ] || { echo "FAIL: $bin is not built"; exit 1; }
command -v gnuplot >/dev/null 2>&1 || { echo "SKIP: gnuplot not found (Debian: gnuplot-nox)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not found"; exit 77; }
out=$(mktemp -d /tmp/odpx-paging-test.XXXXXX) || exit 1
trap 'rm -rf "$out"' EXIT

"$bin" --quick --out "$out/report" > "$out/log" 2>&1 || { cat "$out/log"; echo "FAIL: odpx-paging --quick exited $?"; exit 1; }
python3 - "$out/report" <<'PY' || exit 1
import json, os, sys
d = sys.argv[1]
def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)
lines = open(os.path.join(d, "samples.ndjson")).read().splitlines()
if not lines:
    fail("samples.ndjson is empty")
rows = []
for n, l in enumerate(lines, 1):
    try:
        o = json.loads(l)
    except ValueError as e:
        fail("samples.ndjson:%d: not JSON: %s" % (n, e))
    if not isinstance(o, dict) or "exp" not in o:
        fail("samples.ndjson:%d: not an object with \"exp\"" % n)
    rows.append(o)
def of(exp):
    return [r for r in rows if r["exp"] == exp]
series = {r["series"] for r in of("pincache")}
if series != {"vs_entries", "vs_ws"}:
    fail("pincache series %s" % sorted(series))
for r in of("pincache"):
    if not (0 <= r["miss_ratio"] <= 1 and r["regs"] > 0 and r["state"] in ("OK", "WARMING", "THRASH")):
        fail("pincache sample %s" % r)
phases = {r["phase"] for r in of("timeline")}
if phases != {"warm-up", "steady", "thrash", "recovery"}:
    fail("timeline phases %s" % sorted(phases))
for exp in ("warmup", "prefetch", "latency", "workingset", "phase"):
    rs = of(exp)
    if not rs:
        fail("%s: neither samples nor a skip" % exp)
    if any("skipped" in r for r in rs) and not all(r.get("skipped") for r in rs if "skipped" in r):
        fail("%s: skipped with no reason" % exp)
# the latency rows, where they ran: all ten, each with its reference and ratios, every byte checked
lat = [r for r in of("latency") if "skipped" not in r]
if lat:
    rows_seen = {(r["row"], r["prefetch"]) for r in lat}
    want = {("pinned_hit", "none")} | {(k, p) for k in ("odp_resident", "odp_first_touch",
            "odp_after_reclaim") for p in ("none", "async", "sync")}
    if rows_seen != want:
        fail("latency rows %s" % sorted(rows_seen))
    for r in lat:
        if not (r["p50_us"] <= r["p90_us"] <= r["p99_us"] <= r["p999_us"] <= r["max_us"]) or \
           r["ref"]["p50_us"] <= 0 or abs(r["ratio"]["p50"] - r["p50_us"] / r["ref"]["p50_us"]) > 0.01:
            fail("latency row %s" % r)
# the sweep: every variant at every point, with what its registration returned
ws = [r for r in of("workingset") if "variant" in r]
if ws and {r["variant"] for r in ws} != {"odp", "pinned", "hybrid"}:
    fail("workingset variants %s" % sorted({r["variant"] for r in ws}))
idx = open(os.path.join(d, "index.md")).read()
for key in ("| host |", "| kernel |", "| device |", "| mode |", "| commit |"):
    if key not in idx:
        fail("index.md has no %s row" % key)
pngs = [w.split("](")[1].rstrip(")") for w in idx.split() if w.startswith("![") or "](" in w]
pngs = [p for p in pngs if p.endswith(".png")]
if len(pngs) < 3:
    fail("index.md names %d plots, want the 3 host plots at least" % len(pngs))
for p in pngs:
    b = open(os.path.join(d, p), "rb").read()
    if len(b) <= 8 or b[:8] != b"\x89PNG\r\n\x1a\n":
        fail("%s: not a non-empty PNG (%d bytes)" % (p, len(b)))
print("odpx-paging --quick: %d samples, %d plots, skipped: %s" % (len(rows), len(pngs),
      "; ".join("%s (%s)" % (r["exp"], r["skipped"]) for r in rows if "skipped" in r) or "none"))
PY

"${bin%/*}/odpstat" --no-netlink --json 0.05 3 > "$out/odpstat.ndjson" || { echo "FAIL: odpstat --json"; exit 1; }
"$here/../bench/odpstat-plot" "$out/odpstat.ndjson" "$out/odpstat" > "$out/plot.log" 2>&1 ||
	{ cat "$out/plot.log"; echo "FAIL: odpstat-plot"; exit 1; }
magic=$(head -c 8 "$out/odpstat/timeline.png" | od -An -tx1 | tr -d ' \n')
[ "$magic" = 89504e470d0a1a0a ] && [ "$(wc -c < "$out/odpstat/timeline.png")" -gt 8 ] ||
	{ echo "FAIL: odpstat-plot: timeline.png is not a PNG ($magic)"; exit 1; }
echo "odpstat-plot: timeline.png from 3 samples of odpstat --json"
