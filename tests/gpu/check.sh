#!/usr/bin/env bash
# check.sh: kanel.torch on a CUDA device, in one call of the device tool
# (docs/python.md, "CUDA tensors").  On the GPU machine, from the
# repository's root, with .gpu/ made by tests/gpu/prepare.sh carried:
#
#     bash tests/gpu/check.sh
#
# 1. 2 workers (both on GPU 0 when there is one) train the example CNN
#    for 20 steps under BSP with their tensors staged through pinned host
#    memory; rank 0's parameters must match 2 CPU workers' after the same
#    steps to 1e-5 relative;
# 2. the torch example on CUDA under BSP and PSP, each printing rank 0's
#    step time split into waiting for the exchange and the copies to the
#    host and back (compute is the rest).
#
# Where torch sees no GPU (this development machine), the same steps run
# with CPU tensors and staging forced, so that the script itself is
# tested here.  Exit status: 0 when the parameters match.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$PWD
python=${PYTHON:-python3}
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch' 2>/dev/null &&
	[ -z "${PYTHON-}" ] && python=/usr/bin/python3
"$python" -c 'import torch' || { echo "check.sh: $python has no torch"; exit 1; }

lib=/tmp/kanel-gpu-lib
if [ -f .gpu/lib.tar.xz ]; then
	mkdir -p $lib && tar -C $lib --strip-components=1 -xJf .gpu/lib.tar.xz
fi
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
build=$root/.gpu/build
if ! "$build/tools/kanel" --help >/dev/null 2>&1; then
	echo "check.sh: the carried build does not run here; building"
	build=/tmp/kanel-gpu-build
	command -v meson >/dev/null || "$python" -m pip --version >/dev/null
	meson=$(command -v meson || echo "$python -m mesonbuild.mesonmain")
	$meson setup "$build" --buildtype=release -Drdma=disabled \
		-Ddpdk=disabled -Dio_uring=disabled -Dtests=disabled
	ninja -C "$build"
fi
export KANEL_EXE=$build/tools/kanel KANEL_LIBRARY=$build/libkanel.so.0
export PYTHONPATH=$build/python PYTHONUNBUFFERED=1
data=$root/.gpu/data
[ -f "$data/train-images-idx3-ubyte.gz" ] || data=/usr/share/datasets/fashion-mnist

device=cpu staging=--staging
if "$python" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
	device=cuda staging=
fi
echo "check.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), device $device"
if [ "$device" = cuda ]; then
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
fi
"$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
steps() { # DEVICE STAGING OUT
	"$KANEL_EXE" launch --workers 2 --sync bsp -- "$python" \
		"$root/tests/gpu/cnn_steps.py" --device "$1" $2 --data "$data" \
		--out "$3"
}
echo "== 1. BSP on $device (staged) against CPU, 20 steps, 2 workers"
steps "$device" "$staging" "$out/dev.pt"
steps cpu "" "$out/cpu.pt"
match=0
"$python" "$root/tests/gpu/cnn_steps.py" --compare "$out/dev.pt" \
	"$out/cpu.pt" || match=1

echo "== 2. the example on $device: BSP and PSP, 2 workers, step split"
"$python" "$root/examples/torch_fashion_mnist.py" --device "$device" \
	$staging --workers 2 --protocol bsp,predicted --epochs 5 \
	--time-budget "${CHECK_BUDGET:-40}" --eval-every 10 --data "$data"
exit $match
