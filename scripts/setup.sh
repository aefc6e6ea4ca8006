#!/usr/bin/env bash
# setup.sh [--packages main|all] BUILD_DIR [MESON_OPTION...]
#
# Everything a fresh Debian 12 machine needs to build Kanel: installs the
# Debian packages of the chosen set (only those missing, after an
# apt-get update), then configures BUILD_DIR with the given Meson options
# (reconfiguring an existing one) and builds it.  Used by main.sh and
# test.sh; safe to run again.
#
# --packages main: what the main job needs, the build and `kanel train`
# (main.sh).  --packages all, the default: also the test framework, the
# verbs headers, gnuplot for kanel compare's plots, the python suite's
# NumPy, torch and pytest, and meson-python, pip and venv for
# `pip install .`, clang for the fuzz targets, the rxe suite's VM and
# ethtool for the dpdk suite (test.sh).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
set=all
case ${1-} in
--packages=*) set=${1#--packages=}; shift ;;
--packages) set=${2-}; shift 2 || shift ;;
esac
usage="usage: setup.sh [--packages main|all] BUILD_DIR [MESON_OPTION...]"
build=${1:?$usage}
shift

main_packages=(
	gcc libc6-dev pkg-config meson ninja-build python3
	libssl-dev          # libcrypto: job-secret HMAC (engine/auth.c)
	liburing-dev        # TCP transport (io_uring; epoll without it)
	libdpdk-dev         # the dpdk transport provider (net_af_packet)
	# kanel train: the dataset, its gzip files, the models' sgemm
	dataset-fashion-mnist zlib1g-dev libopenblas-dev
)
test_packages=(
	libcriterion-dev    # test framework
	libibverbs-dev librdmacm-dev # verbs transport
	gnuplot-nox         # the plots of kanel compare (train/cli, docs)
	# the python suite and the PyTorch example: Debian's /usr/bin/python3
	python3-numpy python3-torch python3-pytest
	# pip install . (pyproject.toml; the python/pip test): meson-python,
	# pip, and venv for the test's scratch environment
	python3-mesonpy python3-pip python3-venv
	clang libclang-rt-14-dev # libFuzzer target (tests/fuzz/, -Dfuzz)
	clang-format # the cli/format test: the sources as .clang-format says
	# The rxe suite's VM (tests/rxe/vm.sh fetches the kernel itself),
	# and the rdma-core userspace the guest uses from the host's root:
	# the rxe provider, the rdma tool, ibv_devices and rping.
	qemu-system-x86 busybox-static xz-utils rdma-core
	ibverbs-providers iproute2 ibverbs-utils rdmacm-utils
	# The dpdk suite (tests/dpdk/netns.sh): ip and tc come from
	# iproute2 above; ethtool turns off the veths' offloads.  Its
	# lossy test also needs the kernel's sch_netem (not a package).
	ethtool
)
case $set in
main) packages=("${main_packages[@]}") ;;
all) packages=("${main_packages[@]}" "${test_packages[@]}") ;;
*) echo "setup.sh: --packages: main or all, not '$set'" >&2
   echo "$usage" >&2
   exit 2 ;;
esac

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
