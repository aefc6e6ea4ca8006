#!/bin/sh
# check-device.sh: the rxe harness checking itself, run inside the VM by
# tests/rxe/vm.sh (test rxe/device).  Passes when the guest has an ACTIVE
# rxe0 that both the verbs library (ibv_devices, ibv_devinfo) and the RDMA
# CM (rping, a client and a server on $KANEL_RDMA_ADDR) can use, so that a
# failing verbs test can be told apart from a broken VM.
set -eu

if [ "${KANEL_IN_RXE_VM:-}" != 1 ]; then
	echo "check-device: run me through tests/rxe/vm.sh" >&2
	exit 2
fi
for t in rdma ibv_devices ibv_devinfo rping timeout; do
	command -v "$t" >/dev/null || {
		echo "check-device: SKIP: $t is not installed on the host"
		exit 77
	}
done
addr=${KANEL_RDMA_ADDR:?}
fail() {
	echo "check-device: FAILED: $*"
	exit 1
}

echo "== rdma link"
rdma link show
rdma link show rxe0/1 | grep -q 'state ACTIVE' || fail "rxe0/1 is not ACTIVE"

echo "== ibv_devices"
ibv_devices
ibv_devices | grep -q -w rxe0 || fail "libibverbs does not list rxe0"
echo "== ibv_devinfo -d rxe0"
ibv_devinfo -d rxe0
ibv_devinfo -d rxe0 | grep -q 'state:.*PORT_ACTIVE' ||
	fail "libibverbs does not see rxe0's port as active"

echo "== rping on $addr"
# The server exits after serving one client (-C 3 pings).  The client may
# start before the server listens, and then sees its connection refused,
# so it tries a few times.
timeout 120 rping -s -a "$addr" -C 3 -v >/tmp/rping-server.log 2>&1 &
server=$!
ok=
for try in 1 2 3 4 5; do
	sleep 1
	if timeout 60 rping -c -a "$addr" -C 3 -v; then
		ok=1
		break
	fi
	echo "(client attempt $try failed)"
done
src=0
wait "$server" || src=$?
echo "-- server (exit status $src):"
cat /tmp/rping-server.log
[ -n "$ok" ] || fail "rping client"
[ "$src" -eq 0 ] || fail "rping server"
echo "check-device: rxe0 is ACTIVE and rping works on $addr"
