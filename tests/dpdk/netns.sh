#!/usr/bin/env bash
# usage: tests/dpdk/netns.sh [--netem "NETEM ARGS"] [--ports N | --split] -- CMD [ARG...]
#
# Runs CMD inside a throwaway network namespace holding one veth pair,
# dk0 <-> dk1, for the dpdk transport provider's tests.  The provider
# drives kernel interfaces through DPDK's net_af_packet driver, so any
# Linux machine can run it without a NIC bound to DPDK: a veth pair is
# a wire whose two ends are both here.  Both ends stay in the one
# namespace, so that one process can open both as two DPDK ports (the
# conformance suite's two contexts, one per end), while several
# processes each claim one interface of KANEL_DPDK_IFACES (the first
# free one, under a lock).  The namespace keeps the frames off the
# host's own network and lets a non-default qdisc go on the links.
#
# In the namespace: lo up (the handshake is a kernel TCP connection on
# 127.0.0.1); dk0 and dk1 up, MTU 1500, no addresses, IPv6 off on them
# so that the kernel sends no router solicitations or the like down the
# wire, and their offloads off where ethtool is installed (af_packet
# then sees each frame as it went on the wire).  With --netem, both
# ends get that netem qdisc ("loss 2% reorder 5% delay 1ms"; netem's
# reorder needs a delay), so each direction crosses one.  A qdisc only
# sees the frames DPDK sends if its af_packet port does not bypass
# qdiscs (its qdisc_bypass devarg, 1 by default).
#
# With --ports N (N > 2: a job's coordinator, servers and workers, each
# a process with a port of its own), the namespace holds N veth pairs
# dkI <-> dkIb instead, the dkIb ends in one bridge, and CMD gets
# KANEL_DPDK_IFACES=dk0,...,dk(N-1).
#
# With --split (one pair, for perf/bench_transport --peer-netns), dk1
# goes into a second namespace, the first one's name with "-peer", and
# the two ends get addresses: dk0 10.99.0.1/24 in the namespace CMD runs
# in, dk1 10.99.0.2/24 in the peer namespace, lo up in both.  Kernel TCP
# between 10.99.0.1 and 10.99.0.2 then crosses the veth too (in one
# namespace it would go over lo whatever the address), so that plain
# sockets and the tcp provider are measured over the same wire as the
# dpdk one.  CMD gets KANEL_NETNS_PEER, the peer namespace's name (under
# /run/netns), for a thread of it to enter with setns(); it runs in the
# first namespace all the same, and its KANEL_DPDK_IFACES is dk0,dk1, so
# a context in the peer namespace must let dk0 go by.  netem, if given,
# goes on both ends as without --split.
#
# CMD runs with KANEL_DPDK_IFACES=dk0,dk1, and so with the provider's
# EAL arguments for interfaces (unless KANEL_DPDK_EAL is set): ordinary
# memory instead of hugepages, no PCI scan, no files left in /var/run,
# and with KANEL_DPDK_LOCK_DIR a fresh directory of this run's own (the
# interface names repeat in every namespace).  The namespaces and that
# directory go away on every way out, and netns.sh exits with CMD's
# status.  It needs root, ip (iproute2) and a kernel with network
# namespaces and veth, and for --netem tc and sch_netem; without one of
# them it exits 77 (meson's "skipped") with the reason.
set -euo pipefail

me=dpdk-netns
usage() { sed -n '2s/^# //p' "${BASH_SOURCE[0]}"; }
skip() { # REASON: nothing is broken, this machine just cannot do it
	echo "$me: SKIP: $*"
	exit 77
}
die() {
	echo "$me: $*" >&2
	exit 1
}

netem=
ports=2
split=
while (($#)); do
	case $1 in
	--netem) netem=${2:?--netem needs its arguments}; shift 2 ;;
	--ports) ports=${2:?--ports needs a number}; shift 2 ;;
	--split) split=1; shift ;;
	--) shift; break ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
(($#)) || { usage >&2; exit 2; }
if [ -n "$split" ] && ((ports > 2)); then
	echo "$me: --split is one veth pair across two namespaces," \
		"--ports $ports a bridge in one: not both" >&2
	exit 2
fi

[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, veth)"
command -v ip >/dev/null || skip "needs ip (Debian package iproute2)"
[ -z "$netem" ] || command -v tc >/dev/null ||
	skip "--netem needs tc (Debian package iproute2)"

ns=kanel-dpdk-$$
peer=$ns-peer # --split: where dk1 goes
made=
made_peer=
child=
locks= # this run's KANEL_DPDK_LOCK_DIR
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	# CMD is still running only when a signal brought us here.  The
	# namespace goes before waiting for it: meson follows its SIGTERM
	# with a SIGKILL half a second later, and a namespace left with its
	# name would stay until the next boot.  Without its name, the
	# kernel frees it once CMD is gone.
	[ -z "$child" ] || kill -TERM "$child" 2>/dev/null || true
	if [ -n "$made" ]; then
		# One end goes, and the pair with it.
		ip -n "$ns" link del dk0 2>/dev/null || true
		ip netns del "$ns" 2>/dev/null || true
	fi
	[ -z "$made_peer" ] || ip netns del "$peer" 2>/dev/null || true
	[ -z "$child" ] || wait "$child" 2>/dev/null || true
	[ -z "$locks" ] || rm -rf "$locks"
}
trap cleanup EXIT
# A signal still ends in the EXIT trap, with the shell's usual status.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

in_ns() { ip netns exec "$ns" "$@"; }

err=$(ip netns add "$ns" 2>&1) ||
	skip "cannot make network namespace $ns: $err"
made=1
ip -n "$ns" link set lo up
# New interfaces in the namespace start with IPv6 off, so that not even
# their first moments up send anything; then dk0 and dk1 by name, in
# case the default is not honoured.
in_ns sysctl -q -w net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
links=()
link_ns=() # the namespace of each of links
if [ -n "$split" ]; then
	err=$(ip netns add "$peer" 2>&1) ||
		skip "cannot make network namespace $peer: $err"
	made_peer=1
	ip -n "$peer" link set lo up
	ip netns exec "$peer" sysctl -q -w \
		net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
	# dk1 is made in the peer namespace rather than moved there, so that
	# its IPv6 is off from the start, as that namespace's default says.
	err=$(ip -n "$ns" link add dk0 mtu 1500 type veth peer name dk1 \
		mtu 1500 netns "$peer" 2>&1) ||
		skip "cannot make a veth pair (no veth in this kernel?): $err"
	links=(dk0 dk1)
	link_ns=("$ns" "$peer")
	ifaces=dk0,dk1
elif ((ports <= 2)); then
	err=$(ip -n "$ns" link add dk0 mtu 1500 type veth peer name dk1 \
		mtu 1500 2>&1) ||
		skip "cannot make a veth pair (no veth in this kernel?): $err"
	links=(dk0 dk1)
	link_ns=("$ns" "$ns")
	ifaces=dk0,dk1
else
	err=$(ip -n "$ns" link add kbr0 type bridge 2>&1) ||
		skip "cannot make a bridge: $err"
	ip -n "$ns" link set kbr0 up
	ifaces=
	# Interface numbers 2048 apart: DPDK's af_packet driver names its
	# socket's fanout group (pid ^ ifindex) & 0xffff, and a group is
	# per namespace, so two processes whose pids differ as two of
	# their interfaces' numbers do cannot both open their ports (EINVAL
	# from PACKET_FANOUT).  Consecutive numbers collide for pids close
	# together, as a job's processes are; these only for pids that
	# differ by a multiple of 2048.
	for ((k = 0; k < ports; k++)); do
		err=$(ip -n "$ns" link add "dk$k" index $(((k + 1) * 2048)) \
			mtu 1500 type veth peer name "dk${k}b" \
			index $(((k + 1) * 2048 + 1)) mtu 1500 2>&1) ||
			skip "cannot make a veth pair (no veth?): $err"
		ip -n "$ns" link set "dk${k}b" master kbr0
		links+=("dk$k" "dk${k}b")
		link_ns+=("$ns" "$ns")
		ifaces+=${ifaces:+,}dk$k
	done
fi
for k in "${!links[@]}"; do
	i=${links[k]}
	n=${link_ns[k]}
	ip netns exec "$n" sysctl -q -w "net.ipv6.conf.$i.disable_ipv6=1" \
		2>/dev/null || true
	if command -v ethtool >/dev/null; then
		# Not every feature is there to turn off on every kernel.
		ip netns exec "$n" ethtool -K "$i" rx off tx off sg off tso off \
			gso off gro off >/dev/null 2>&1 || true
	fi
	if [ -n "$netem" ]; then
		# shellcheck disable=SC2086 # the qdisc's words
		if ! err=$(ip netns exec "$n" tc qdisc add dev "$i" root \
			netem $netem 2>&1); then
			case $err in
			*"qdisc kind is unknown"*)
				skip "the kernel has no sch_netem: $err" ;;
			esac
			die "tc qdisc add dev $i root netem $netem: $err"
		fi
	fi
	ip -n "$n" link set "$i" up
done
if [ -n "$split" ]; then
	ip -n "$ns" addr add 10.99.0.1/24 dev dk0
	ip -n "$peer" addr add 10.99.0.2/24 dev dk1
	echo "$me: namespace $ns (dk0, 10.99.0.1/24) and $peer (dk1," \
		"10.99.0.2/24)${netem:+, netem $netem on both ends}"
	export KANEL_NETNS_PEER=$peer
else
	echo "$me: namespace $ns, interfaces $ifaces${netem:+, netem $netem on every link end}"
fi

export KANEL_DPDK_IFACES=$ifaces
# The interfaces' lock files in a directory of this run's own: the names
# dk0, dk1, ... are the same in every namespace this script makes, and
# a process of another run (or one a killed run left behind) holding
# /tmp/kanel-dpdk-dk0.lock must not keep this run's processes off its
# own dk0.
locks=$(mktemp -d /tmp/kanel-dpdk-locks.XXXXXX)
export KANEL_DPDK_LOCK_DIR=$locks
# In the background, so that a signal to this shell runs the traps now
# rather than once CMD has finished; ip itself rather than in_ns, which
# would put a subshell between $child and CMD, and CMD would outlive the
# TERM sent to it.  Explicitly on our stdin, which a background job
# otherwise does not get.
ip netns exec "$ns" "$@" <&0 &
child=$!
status=0
wait "$child" || status=$?
child=
exit "$status"
