#!/bin/sh
# SPDX-License-Identifier: MIT
# bench_load_check.sh BENCH JSON [ARGS...] - the smoke test of
# `tollfree-bench load`: it runs with ARGS and exits 0, every mode it ran
# completed sessions and none failed, and its --json file parses with the
# documented keys.  Behaviour only: no time or rate is judged.
set -eu
bench=$1
json=$2
shift 2
rm -f "$json"
"$bench" load --json "$json" "$@"
if command -v python3 >/dev/null 2>&1; then
	python3 - "$json" <<'PY'
import json
import sys

with open(sys.argv[1]) as f:
    d = json.load(f)
assert d["bench"] == "load", d["bench"]
assert d["modes"], "no modes"
keys = ("mode", "t_typical_us", "p50_us", "p99_us", "p999_us",
        "sessions_per_s", "failed", "server_cpu_us_per_session")
for m in d["modes"]:
    for k in keys:
        assert k in m, "%s: no %s" % (m.get("mode"), k)
    assert m["failed"] == 0, "%s: %d sessions failed" % (m["mode"], m["failed"])
    assert m["sessions_per_s"] > 0, "%s: no session completed" % m["mode"]
if "hog" in d:
    # --hog: it never held more than it asked for and one more, nor more
    # than the server's bound per address, and it was refused only at
    # that bound.  How far it got in the run's seconds depends on the
    # machine (a sanitizer build may not reach the bound): not judged.
    for k in ("hog_refused", "hog_held", "hog_bound", "p99_us_hog"):
        assert k in d, "no %s" % k
    assert 0 < d["hog_held"] <= min(d["hog"] + 1, d["hog_bound"]), \
        "hog held %d (asked %d, bound %d)" % (d["hog_held"], d["hog"],
                                              d["hog_bound"])
    if d["hog_refused"] > 0:
        assert d["hog_held"] == d["hog_bound"], \
            "the hog was refused at %d sessions, below the bound %d" % (
                d["hog_held"], d["hog_bound"])
    names = [m["mode"] for m in d["modes"]]
    for m in d["p99_us_hog"]:
        assert m in names and m + "+hog" in names, m
    print("load json: hog held %d, %d refused" % (d["hog_held"],
                                                  d["hog_refused"]))
print("load json: %d modes, no failed session" % len(d["modes"]))
PY
else
	# Without python: the file is there, names the bench, and no mode
	# has a failed session or an empty count.
	grep -q '"bench":"load"' "$json"
	grep -q '"modes":\[{' "$json"
	if grep -q '"failed":[1-9]' "$json" ||
		grep -q '"sessions_per_s":0\.0,' "$json"; then
		echo "load json: a failed session or a mode without any" >&2
		exit 1
	fi
fi
