#!/bin/sh
# tests/format/check.sh BUILD_DIR - the tree against .clang-format, through meson's own
# clang-format-check target (every source meson knows of, less .clang-format-ignore's globs:
# the generated Unicode tables). Exit 77 (skipped) where clang-format is not installed, since
# meson then makes no such target. To fix what it reports: ninja -C build clang-format
command -v clang-format >/dev/null 2>&1 || { echo "clang-format is not installed"; exit 77; }
ninja -C "$1" -t targets all 2>/dev/null | grep -q '^clang-format-check:' \
    || { echo "meson found no clang-format at configure time: reconfigure"; exit 77; }
exec ninja -C "$1" clang-format-check
