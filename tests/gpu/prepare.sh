#!/usr/bin/env bash
# prepare.sh: what tests/gpu/check.sh takes to a GPU machine, made here
# in .gpu/ (ignored by git; the device tool carries it): a release build
# of Kanel without the providers that machine has no libraries for
# (verbs, dpdk, io_uring: TCP runs on epoll), the shared libraries the
# build needs beyond glibc (xz-compressed: OpenBLAS alone is 36 MB), and
# Fashion-MNIST with its first 12,000 training images (the device tool
# carries 64 MiB in all).  check.sh builds there instead when this build
# does not run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
data=${KANEL_DATA:-/usr/share/datasets/fashion-mnist}
rm -rf .gpu/lib .gpu/lib.tar.xz .gpu/data
mkdir -p .gpu/lib .gpu/data
if [ -d .gpu/build ]; then
	meson setup --reconfigure .gpu/build >/dev/null
else
	meson setup .gpu/build --buildtype=release -Drdma=disabled \
		-Ddpdk=disabled -Dio_uring=disabled -Dtests=disabled >/dev/null
fi
ninja -C .gpu/build >/dev/null
# every library beyond glibc's own and the loader
ldd .gpu/build/tools/kanel .gpu/build/libkanel.so.0 |
	awk '$3 ~ /^\// {print $3}' | sort -u | grep -v '/\.gpu/' |
	grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libgcc_s)\.so' |
	while read -r lib; do cp -L "$lib" .gpu/lib/; done
tar -C .gpu -cJf .gpu/lib.tar.xz lib
rm -rf .gpu/lib
cp "$data"/t10k-*-ubyte.gz .gpu/data/
/usr/bin/python3 - "$data" .gpu/data 12000 <<'PY'
import gzip, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for part, size in (("images-idx3", 784), ("labels-idx1", 1)):
    name = f"train-{part}-ubyte.gz"
    raw = gzip.open(f"{src}/{name}").read()
    head = 16 if size > 1 else 8
    out = bytearray(raw[:head])
    out[4:8] = n.to_bytes(4, "big")
    with gzip.open(f"{dst}/{name}", "wb") as f:
        f.write(bytes(out) + raw[head:head + n * size])
PY
du -sh .gpu | sed 's/^/prepare.sh: /'
