#!/bin/sh
# SPDX-License-Identifier: MIT
# man-pages: every installed man page renders with groff -ww and no warning, and
# every symbol libodpx.so exports is in the odpx_ namespace and has a page in
# section 3; each installed tool has one in section 1.  BUILD names the build
# directory (default build).
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
B=$(cd "$src/${BUILD:-build}" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/odpx-man.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

command -v groff >/dev/null || fail "groff not found (Debian: groff-base)"
cd "$src" || exit 1
DESTDIR=$tmp/root sh "$B/install.sh" >/dev/null || fail "install.sh"
man=$(find "$tmp/root" -type d -name man7)
[ -n "$man" ] || fail "no man7 directory installed"
man=$(dirname "$man")
n=0
cd "$man" || exit 1
for p in man*/*; do
	# -s: soelim, for the pages that are a .so to another; run from the man
	# directory, as man(1) does
	w=$(groff -ww -z -s -man -Tutf8 "$p" 2>&1)
	[ -z "$w" ] || fail "$p: $w"
	[ "$(groff -s -man -Tutf8 "$p" 2>/dev/null | wc -l)" -gt 5 ] || fail "$p renders empty"
	n=$((n + 1))
done
syms=$(nm -D --defined-only "$B/libodpx.so" | awk '$2 ~ /^[TDBR]$/ { sub(/@.*/, "", $3); print $3 }')
[ -n "$syms" ] || fail "nm found no symbol in $B/libodpx.so"
for s in $syms; do
	case $s in odpx_*) ;; *) fail "exported symbol $s is outside the odpx_ namespace";; esac
	[ -f "man3/$s.3" ] || fail "exported symbol $s has no man page"
done
for t in "$tmp"/root/*/bin/* "$tmp"/root/*/*/bin/*; do
	[ -e "$t" ] || continue
	[ -f "man1/${t##*/}.1" ] || fail "tool ${t##*/} has no man page"
done
[ -f man7/odpx.7 ] || fail "no odpx(7)"
echo "$n pages rendered without warning; $(echo "$syms" | wc -l) exported symbols, each with a page"
