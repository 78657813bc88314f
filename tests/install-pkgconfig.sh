#!/bin/sh
# SPDX-License-Identifier: MIT
# install-pkgconfig: stage `ninja install` in a DESTDIR, then build, link and run
# programs against the staged tree through pkg-config: the README's example,
# dynamically; a program calling odpx_open_uring and odpx_open_verbs, dynamically
# and statically (pkg-config --static, libodpx.a); then uninstall and find nothing
# left.  BUILD names the build directory (default build).
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
B=$(cd "$src/${BUILD:-build}" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/odpx-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
CC=${CC:-cc}

cd "$src" || exit 1
DESTDIR=$tmp/root sh "$B/install.sh" || fail "install.sh with DESTDIR=$tmp/root"
pc=$(find "$tmp/root" -name odpx.pc)
[ -n "$pc" ] || fail "no odpx.pc staged"
libdir=$(dirname "$(dirname "$pc")")
for f in libodpx.a libodpx.so.0.1.0 libodpx.so.0 libodpx.so; do
	[ -e "$libdir/$f" ] || fail "$libdir/$f not staged"
done
readelf -d "$libdir/libodpx.so.0.1.0" | grep -q 'SONAME.*\[libodpx\.so\.0\]' ||
	fail "soname is not libodpx.so.0"
# the drop-in, where this configuration builds it (libibverbs, no sanitizer)
if grep -q "^build ${BUILD:-build}/libodpx-preload.so:" build.ninja 2>/dev/null; then
	run=$(find "$tmp/root" -name odpx-run)
	[ -e "$libdir/libodpx-preload.so" ] && [ -n "$run" ] || fail "the drop-in is not staged"
	grep -q "\"${libdir#"$tmp/root"}\"" "$run" || fail "odpx-run does not look in ${libdir#"$tmp/root"}"
fi
export PKG_CONFIG_PATH="$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$tmp/root"
pkg-config --exists odpx || fail "pkg-config finds no odpx in $libdir/pkgconfig"
echo "odpx.pc: $(pkg-config --modversion odpx); static: $(pkg-config --static --libs odpx)"

# the README's example, verbatim: the C block after the marker line
awk '/<!-- example -->/ { m = 1; next } m && /^```c/ { p = 1; next } p && /^```/ { exit } p' \
	README.md > "$tmp/example.c"
[ -s "$tmp/example.c" ] || fail "no example in README.md"

cat > "$tmp/both.c" <<'C'
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <odpx.h>

int main(void)
{
	struct odpx_ctx *ctx;
	struct odpx_mr *mr;
	char *buf = aligned_alloc(4096, 1 << 16);
	int r;

	if (!buf || strcmp(odpx_version(), ODPX_VERSION))
		return 1;
	/* the verbs backend's code is linked in; a NULL PD is refused */
	r = odpx_open_verbs(NULL, NULL, &ctx);
	if (r != -EINVAL && r != -EOPNOTSUPP) {
		fprintf(stderr, "odpx_open_verbs(NULL): %d\n", r);
		return 1;
	}
	if ((r = odpx_open_uring(NULL, &ctx)) < 0) {
		fprintf(stderr, "odpx_open_uring: %s\n", odpx_last_reason());
		return 1;
	}
	if ((r = odpx_reg(ctx, buf, 1 << 16, ODPX_ACCESS_LOCAL_WRITE, &mr)) < 0) {
		fprintf(stderr, "odpx_reg: %s\n", odpx_last_reason());
		return 1;
	}
	if (odpx_dereg(ctx, mr) < 0 || odpx_close(ctx) < 0)
		return 1;
	free(buf);
	puts("ok");
	return 0;
}
C
cflags=$(pkg-config --cflags odpx)
# shellcheck disable=SC2046
$CC -Wall -Werror $cflags -o "$tmp/example" "$tmp/example.c" $(pkg-config --libs odpx) ||
	fail "the README's example does not build against the staged tree"
$CC -Wall -Werror $cflags -o "$tmp/both" "$tmp/both.c" $(pkg-config --libs odpx) ||
	fail "dynamic link"
# static: libodpx.a, its dependencies from Requires.private and Libs.private
$CC -Wall -Werror $cflags -o "$tmp/both-static" "$tmp/both.c" \
	$(pkg-config --static --libs odpx | sed 's/-lodpx/-l:libodpx.a/') ||
	fail "static link with pkg-config --static"
readelf -d "$tmp/both" | grep -q 'NEEDED.*libodpx\.so\.0' || fail "dynamic program needs no libodpx.so.0"
readelf -d "$tmp/both-static" | grep -q 'NEEDED.*libodpx' && fail "static program needs libodpx.so"
for p in example both both-static; do
	out=$(LD_LIBRARY_PATH="$libdir" "$tmp/$p" 2>&1) || fail "$p: $out"
	echo "$p: $(echo "$out" | tail -n1)"
done

DESTDIR=$tmp/root sh "$B/uninstall.sh" || fail "uninstall.sh"
left=$(find "$tmp/root" -type f -o -type l)
[ -z "$left" ] || fail "left after uninstall: $left"
echo "installed, linked (dynamic, static), ran, uninstalled"
