#!/usr/bin/env bash
# setup.sh BUILD_DIR [MESON_OPTION...]
#
# Everything a fresh Debian 12 machine needs to build Kanel: installs the
# Debian packages the project uses (only when one is missing, after an
# apt-get update), then configures BUILD_DIR with the given Meson options
# (reconfiguring an existing one) and builds it.  Used by main.sh and
# test.sh; safe to run again.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:?usage: setup.sh BUILD_DIR [MESON_OPTION...]}
shift

packages=(
	gcc libc6-dev pkg-config meson ninja-build python3
	libcriterion-dev    # test framework
	libssl-dev          # libcrypto: job-secret HMAC (engine/auth.c)
	liburing-dev        # TCP transport (io_uring)
	libibverbs-dev librdmacm-dev # verbs transport
	# kanel train: the dataset, its gzip files, the models' sgemm, and
	# the plots of kanel compare
	dataset-fashion-mnist zlib1g-dev libopenblas-dev gnuplot-nox
	clang libclang-rt-14-dev # libFuzzer target (tests/fuzz/, -Dfuzz)
	# The rxe suite's VM (tests/rxe/vm.sh fetches the kernel itself),
	# and the rdma-core userspace the guest uses from the host's root:
	# the rxe provider, the rdma tool, ibv_devices and rping.
	qemu-system-x86 busybox-static xz-utils rdma-core
	ibverbs-providers iproute2 ibverbs-utils rdmacm-utils
)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
		grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
	sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	echo "setup: installing ${missing[*]}"
	"${sudo[@]}" apt-get update -q
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" \
		apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cd "$here"
if [ -f "$build/build.ninja" ]; then
	meson configure "$build" "$@"
else
	meson setup "$build" "$@"
fi
ninja -C "$build"
