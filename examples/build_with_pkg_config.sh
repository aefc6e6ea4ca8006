#!/usr/bin/env bash
# build_with_pkg_config.sh BUILD_DIR SOURCE KANEL: install the build into
# a scratch root, compile and link SOURCE with nothing but the flags
# `pkg-config kanel` gives for that install (as a program outside the
# project is built), then run it as a one-worker BSP job.
set -euo pipefail
build=$1 src=$2 kanel=$3
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
meson install -C "$build" --destdir "$root" --no-rebuild --quiet >/dev/null
pc=$(find "$root" -name kanel.pc -print -quit)
test -n "$pc" || { echo "no kanel.pc installed" >&2; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
# the .pc names the real prefix; the scratch root stands in front of it
prefix=$root$(pkg-config --variable=prefix kanel)
flags=$(pkg-config --define-variable=prefix="$prefix" --cflags --libs kanel)
lib=$(pkg-config --define-variable=prefix="$prefix" --variable=libdir kanel)
# a sanitizer build's library needs its runtime loaded first: a program
# linked with it gets that by being built with the same sanitizers
san=()
deps=$(ldd "$lib/libkanel.so" 2>/dev/null || true)
case $deps in *libasan*) san+=(-fsanitize=address) ;; esac
case $deps in *libubsan*) san+=(-fsanitize=undefined) ;; esac
# shellcheck disable=SC2086 # pkg-config's words are separate flags
cc -std=c11 -Wall -Wextra -Werror "${san[@]}" "$src" -o "$root/prog" \
	$flags -lm
echo "built $(basename "$src") with: ${san[*]} $flags"
LD_LIBRARY_PATH=$lib "$kanel" launch --workers 1 --optimizer momentum \
	--lr 0.5 -- "$root/prog" 200
