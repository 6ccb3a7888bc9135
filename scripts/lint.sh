#!/bin/bash
# lint.sh - static analysis: cppcheck and clang-tidy over src/, tools/,
# tests/ and fuzz/.
#
# Usage: scripts/lint.sh [BUILD_DIR]
#   BUILD_DIR  where to configure (clang, compile_commands.json, fuzz
#              targets included); default build-lint.  Nothing is built.
# Configuration, checked in: .clang-tidy (the check set, with the reason
# for each check left out), .clang-tidy-suppressions (narrow false
# positives), .cppcheck-suppressions.
# Exit 0 when both tools report nothing; 1 otherwise (findings listed).
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD
bdir=${1:-build-lint}
jobs=$(nproc)

scripts/deps.sh build || exit 1
missing=()
for p in clang clang-tidy cppcheck; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	[ "$st" = "install ok installed" ] || missing+=("$p")
done
if ((${#missing[@]})); then
	if [ "$(id -u)" != 0 ]; then
		echo "lint.sh: missing packages: ${missing[*]} (run as root)" >&2
		exit 1
	fi
	echo "lint.sh: installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends "${missing[@]}" >/dev/null ||
		exit 1
fi

echo "=== [lint] configure $bdir (clang, compile_commands.json)"
mkdir -p "$bdir"
if ! CC=clang cmake -S "$top" -B "$bdir" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
	-DTOLLFREE_FUZZ=ON -DBUILD_TESTING=ON >"$bdir/cmake.log" 2>&1; then
	cat "$bdir/cmake.log"
	echo "lint: configure failed"
	exit 1
fi
db=$bdir/compile_commands.json
# tests/layers/ holds probes of the include rule; one of each pair must
# not compile, by design (CTests layers_include_* and public_include_*).
mapfile -t files < <(sed -n 's/^ *"file": "\(.*\)",\{0,1\}$/\1/p' "$db" |
	grep -E "^$top/(src|tools|tests|fuzz)/" | grep -v "^$top/tests/layers/" |
	sort -u)
if ((${#files[@]} == 0)); then
	echo "lint: no source files in $db"
	exit 1
fi

fail=0
summary=()

echo "=== [lint] cppcheck $(cppcheck --version | sed 's/Cppcheck //') on ${#files[@]} files"
# -i: the compile database also holds bench/ and examples/.
cppcheck --project="$db" --enable=warning,performance,portability \
	--inline-suppr --error-exitcode=1 \
	--suppressions-list=.cppcheck-suppressions -i bench -i examples -i tests/layers \
	-j"$jobs" -q --template='{file}:{line}: {severity}({id}): {message}' \
	>"$bdir/cppcheck.log" 2>&1
rc=$?
n=$(grep -c ': [a-z]*([A-Za-z0-9_]*): ' "$bdir/cppcheck.log")
if ((rc != 0)); then
	cat "$bdir/cppcheck.log"
	summary+=("cppcheck: $n finding(s), exit $rc (log $bdir/cppcheck.log)")
	fail=1
else
	summary+=("cppcheck: clean")
fi

echo "=== [lint] $(clang-tidy --version | grep -o 'LLVM version [0-9.]*' | sed 's/LLVM/clang-tidy/') on ${#files[@]} files ($jobs jobs)"
printf '%s\n' "${files[@]}" |
	xargs -P"$jobs" -n4 clang-tidy -p "$bdir" --quiet >"$bdir/clang-tidy.raw" 2>&1
tidy_rc=$?
# Keep each diagnostic (file:line:col: warning|error: msg [check]) with the
# source line clang-tidy prints after it; drop the suppressed ones; the
# same header diagnostic reached from several files counts once.
awk -v top="$top/" '
	FNR == NR {
		if ($0 ~ /^[ \t]*(#|$)/)
			next
		n = split($0, f, / \| /)
		if (n < 4)
			next
		ns++
		s_check[ns] = f[1]; s_file[ns] = f[2]; s_text[ns] = f[3]
		next
	}
	pending {
		src = $0
		sub(/^[ \t]+/, "", src)
		emit()
		pending = 0
	}
	/^\/.*:[0-9]+:[0-9]+: (warning|error): .* \[[^]]+\]$/ {
		line = $0
		check = line
		sub(/.* \[/, "", check)
		sub(/[],].*$/, "", check)
		file = line
		sub(/:[0-9]+:[0-9]+: .*/, "", file)
		sub(top, "", file)
		pending = 1
	}
	function emit(   i, out) {
		for (i = 1; i <= ns; i++)
			if (check == s_check[i] && file ~ s_file[i] &&
			    (s_text[i] == "*" || index(src, s_text[i])))
				return
		out = line
		sub(top, "", out)
		if (!(out in seen)) {
			seen[out] = 1
			print out
			print "    " src
		}
	}
	END { if (pending) emit() }
' .clang-tidy-suppressions "$bdir/clang-tidy.raw" >"$bdir/clang-tidy.log"
n=$(grep -c '^[^ ]' "$bdir/clang-tidy.log")
if ((n > 0)); then
	cat "$bdir/clang-tidy.log"
	summary+=("clang-tidy: $n finding(s) (full output $bdir/clang-tidy.raw)")
	fail=1
elif grep -q 'error: .*\[clang-diagnostic-error\]\|^Error while processing' "$bdir/clang-tidy.raw"; then
	summary+=("clang-tidy: compile errors (see $bdir/clang-tidy.raw)")
	fail=1
else
	summary+=("clang-tidy: clean (xargs exit $tidy_rc)")
fi

echo
echo "=== [lint] summary"
printf '  %s\n' "${summary[@]}"
if ((fail)); then
	echo "lint: FAILED"
	exit 1
fi
echo "lint: ok"
