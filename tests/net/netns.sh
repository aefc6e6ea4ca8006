#!/bin/sh
# usage: tests/net/netns.sh [--netem "NETEM ARGS"] -- CMD [ARG...]
#
# Runs CMD with a network of network namespaces around it, for the tests
# of links that misbehave: one namespace per worker (kn-w0 .. kn-w7),
# each joined to this (the root) namespace by a veth pair (kn-r$i here,
# 10.98.$i.1; kn-w$i there, 10.98.$i.2, its default route back), and the
# coordinator and servers here on 10.77.0.1 (the VM's dummy0).  With
# --netem, each end of every pair gets that netem qdisc ("delay 20ms
# loss 1%"), so every packet between a worker and anyone else crosses two.
#
# CMD runs with KANEL_TEST_HOST=10.77.0.1 (where the job listens),
# KANEL_TEST_WORKER_NETNS=kn-w (worker i moves into kn-w$i) and
# KANEL_TEST_NET_IF=kn-r (a test partitions worker i with a qdisc on
# kn-r$i), and the namespaces are removed afterwards.  It needs root,
# ip and tc from iproute2, and a kernel with veth and sch_netem: the rxe
# VM (tests/rxe/vm.sh), where tests/net/meson.build runs it; elsewhere it
# exits 77 (skipped) with the reason.
set -eu

netem=
while [ $# -gt 0 ]; do
	case $1 in
	--netem) netem=$2; shift 2 ;;
	--) shift; break ;;
	*) echo "usage: netns.sh [--netem ARGS] -- CMD [ARG...]" >&2; exit 2 ;;
	esac
done
[ $# -gt 0 ] || { echo "netns.sh: no CMD" >&2; exit 2; }

skip() { echo "netns.sh: SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root"
command -v ip >/dev/null && command -v tc >/dev/null ||
	skip "needs ip and tc (Debian package iproute2)"
host=${KANEL_RDMA_ADDR:-10.77.0.1}
ip -o addr show | grep -q "inet $host/" ||
	skip "no interface holds $host (run inside tests/rxe/vm.sh)"

n=8
cleanup() {
	i=0
	while [ $i -lt $n ]; do
		ip link del kn-r$i 2>/dev/null || true
		ip netns del kn-w$i 2>/dev/null || true
		i=$((i + 1))
	done
}
trap cleanup EXIT
i=0
while [ $i -lt $n ]; do
	ip netns add kn-w$i
	ip link add kn-r$i type veth peer name kn-w$i netns kn-w$i ||
		skip "cannot make a veth pair (no veth module?)"
	ip addr add 10.98.$i.1/24 dev kn-r$i
	ip link set kn-r$i up
	ip -n kn-w$i addr add 10.98.$i.2/24 dev kn-w$i
	ip -n kn-w$i link set lo up
	ip -n kn-w$i link set kn-w$i up
	ip -n kn-w$i route add default via 10.98.$i.1
	if [ -n "$netem" ]; then
		# shellcheck disable=SC2086 # the qdisc's words
		tc qdisc add dev kn-r$i root netem $netem ||
			skip "tc netem failed (no sch_netem module?)"
		# shellcheck disable=SC2086
		ip netns exec kn-w$i tc qdisc add dev kn-w$i root netem $netem
	fi
	i=$((i + 1))
done
echo "netns.sh: $n worker namespaces${netem:+, netem $netem on every veth}"
KANEL_TEST_HOST=$host KANEL_TEST_WORKER_NETNS=kn-w KANEL_TEST_NET_IF=kn-r \
	"$@"
