#!/bin/bash
# layers.sh - check that calls between the library's folders go one way
# (src/README.md): util <- core <- mem <- session, and the providers beside
# core, using util only (core reaches them through their ops tables).
#
#   scripts/layers.sh [BUILD_DIR]      (default: build)
#
# It reads the objects the build made (nm: the global symbols each folder's
# objects define and the ones they use), prints the folder graph with one
# example symbol per edge, and fails on an edge the rule does not allow,
# which also rules out every loop between folders.  Include paths are
# enforced by the build itself (src/CMakeLists.txt); this checks the calls,
# including those made through a declaration copied by hand.
set -euo pipefail
build=${1:-build}
objdir=$build/src/CMakeFiles
[ -d "$objdir" ] || { echo "layers: no objects under $objdir (build first)" >&2; exit 2; }

# rank: a folder may use a folder of lower rank only; the providers may use
# util; core may use the providers (their ops tables).
declare -A allowed=(
	[core]="util soft verbs"
	[mem]="util core"
	[session]="util core mem"
	[soft]="util"
	[verbs]="util"
	[util]=""
)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for layer in util core mem session soft verbs; do
	d=$objdir/tollfree_$layer.dir
	[ -d "$d" ] || continue
	find "$d" -name '*.o' -print0 | xargs -0 -r nm -g --defined-only |
		awk 'NF == 3 { print $3 }' | sort -u >"$tmp/def.$layer"
	find "$d" -name '*.o' -print0 | xargs -0 -r nm -g --undefined-only |
		awk '{ print $NF }' | sort -u >"$tmp/use.$layer"
done

bad=0
echo "layers: folder -> folder it calls (symbols used, one example)"
for from in util core mem session soft verbs; do
	[ -f "$tmp/use.$from" ] || continue
	for to in util core mem session soft verbs; do
		[ "$from" = "$to" ] && continue
		[ -f "$tmp/def.$to" ] || continue
		n=$(comm -12 "$tmp/use.$from" "$tmp/def.$to" | wc -l)
		((n > 0)) || continue
		ex=$(comm -12 "$tmp/use.$from" "$tmp/def.$to" | head -1)
		if [[ " ${allowed[$from]} " == *" $to "* ]]; then
			printf '  %-8s -> %-8s %3d  (%s)\n' "$from" "$to" "$n" "$ex"
		else
			printf '  %-8s -> %-8s %3d  WRONG WAY:' "$from" "$to" "$n"
			comm -12 "$tmp/use.$from" "$tmp/def.$to" | head -5 | tr '\n' ' '
			echo
			bad=$((bad + 1))
		fi
	done
done
if ((bad)); then
	echo "layers: $bad edge(s) against the rule in src/README.md"
	exit 1
fi
echo "layers: every call goes down; no loop between folders"
