#!/bin/sh
# tests/install/check.sh BUILD_DIR SOURCE_ROOT PREFIX LIBDIR - what a user gets from
# `meson install`: the tree is installed into a scratch DESTDIR, and the example program
# (examples/ledger) is built from its source with nothing but `pkg-config --cflags --libs cairn`
# against that install, then run. This is what catches a cairn.pc that names a package the
# system does not have (Debian 12 ships msgpack as "msgpack", not "msgpack-c").
set -eu
build=$1 src=$2 prefix=$3 libdir=$4
command -v pkg-config >/dev/null || { echo "pkg-config is not installed"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cairn-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --destdir "$tmp/root" --no-rebuild --quiet >"$tmp/install.log" 2>&1 \
    || { cat "$tmp/install.log"; echo "meson install failed"; exit 1; }
case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
pc=$tmp/root$libdir/pkgconfig
[ -f "$pc/cairn.pc" ] || { echo "no cairn.pc in $pc"; exit 1; }
flags=$(PKG_CONFIG_PATH=$pc PKG_CONFIG_SYSROOT_DIR=$tmp/root pkg-config --cflags --libs cairn) \
    || { echo "pkg-config --cflags --libs cairn failed:"; cat "$pc/cairn.pc"; exit 1; }
echo "pkg-config: $flags"
# shellcheck disable=SC2086 # the flags are meant to split into words
cc -o "$tmp/ledger" "$src/examples/ledger/ledger.c" $flags -lcrypto \
    || { echo "the example did not build against the installed header and library"; exit 1; }
LD_LIBRARY_PATH=$tmp/root$libdir "$tmp/ledger" --help >"$tmp/help.txt" 2>&1 \
    || { cat "$tmp/help.txt"; echo "the installed example did not run"; exit 1; }
grep -q "usage" "$tmp/help.txt" || { cat "$tmp/help.txt"; echo "no usage from --help"; exit 1; }
echo "installed, built with pkg-config and run: ok"
