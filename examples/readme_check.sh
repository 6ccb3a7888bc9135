#!/bin/sh
# SPDX-License-Identifier: MIT
# The README shows examples verbatim: for each FILE, the ```c block that
# follows the line "<!-- examples/NAME -->" in README must equal FILE.
# Usage: readme_check.sh README FILE...
set -eu
readme=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
st=0
for f in "$@"; do
	name=examples/$(basename "$f")
	awk -v mark="<!-- $name -->" '
		$0 == mark { state = 1; next }
		state == 1 { state = ($0 == "```c") ? 2 : 0; next }
		state == 2 && $0 == "```" { exit }
		state == 2 { print }
	' "$readme" >"$dir/block"
	if [ ! -s "$dir/block" ]; then
		echo "readme_check: $readme has no \`\`\`c block after <!-- $name -->"
		st=1
	elif ! diff -u "$f" "$dir/block"; then
		echo "readme_check: the README's copy of $name differs (above)"
		st=1
	else
		echo "readme_check: $name: README matches"
	fi
done
exit $st
