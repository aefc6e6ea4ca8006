#!/usr/bin/env bash
# usage: tests/rxe/vm.sh [--timeout SECS] [--out DIR] -- CMD [ARG...]
#
# Runs CMD inside a throwaway qemu VM that has a real kernel soft-RoCE
# (rdma_rxe) device, for the RDMA tests: rxe needs kernel support that the
# machines we build on lack, so a VM is the only way to get a working
# verbs device on an ordinary CI machine.
#
# The guest boots Debian's own kernel (the package linux-image-amd64
# depends on, fetched with apt-get download into a cache) with a small
# busybox initramfs, and sees the host's whole root file system over 9p,
# so CMD finds the same binaries, libraries (rdma-core, the rxe provider)
# and build tree as on the host.  The guest may write anywhere: an overlay
# keeps its changes in guest memory, and the host never sees them.  In
# the guest: one rxe device rxe0 on a dummy interface with IP 10.77.0.1
# (it exists only inside the VM; client and server both use it),
# RLIMIT_MEMLOCK unlimited, empty /run and /dev/shm, and CMD running as
# root in the host's current directory with KANEL_RDMA_ADDR=10.77.0.1,
# KANEL_RDMA_NETDEV=dummy0 (rxe0's interface) and KANEL_IN_RXE_VM=1 set.
#
# Prints CMD's output (stdout and stderr together) on stdout once the VM
# is done and exits with CMD's status.  Exits 77 (meson's "skipped") with
# a one-line reason when something the VM needs is missing on this
# machine, and 1 when the VM itself fails or runs past --timeout (default
# 900 s).  --out DIR keeps the run's files (output, console.log,
# guest.log) in DIR; by default they go to a temporary directory that is
# removed afterwards.
#
# Environment: KANEL_RXE_CACHE (default ~/.cache/kanel-rxe) holds the
# kernel and the module initramfs, built once per kernel package;
# KANEL_RXE_KERNEL_PKG picks the kernel package; KANEL_RXE_ACCEL (default
# tcg) is qemu's -accel.  Host variables named KANEL_* and *SAN_OPTIONS
# are passed on to CMD.  See tests/rxe/README.md.
set -euo pipefail

me=rxe-vm
addr=10.77.0.1
t0=$EPOCHREALTIME

usage() { sed -n '2s/^# //p' "${BASH_SOURCE[0]}"; }
skip() { # REASON: nothing is broken, this machine just cannot run the VM
	echo "$me: SKIP: $*"
	exit 77
}
die() {
	echo "$me: $*" >&2
	exit 1
}
note() { echo "$me: $*" >&2; }
secs() { # FROM [TO]: seconds between two $EPOCHREALTIME stamps
	local to=${2:-$EPOCHREALTIME}
	awk -v a="$1" -v b="$to" 'BEGIN { printf "%.1f", b - a }'
}

timeout=900
out=
while (($#)); do
	case $1 in
	--timeout) timeout=${2:?--timeout needs SECS}; shift 2 ;;
	--out) out=${2:?--out needs DIR}; shift 2 ;;
	--) shift; break ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
(($#)) || { usage >&2; exit 2; }
[[ $timeout =~ ^[1-9][0-9]*$ ]] || die "--timeout wants whole seconds, not '$timeout'"

# Prerequisites.  A missing one is a skip, not a failure: a developer
# machine without qemu should still pass the rest of the suite.
[ "$(uname -m)" = x86_64 ] || skip "needs an x86_64 host (this is $(uname -m))"
qemu=$(command -v qemu-system-x86_64) ||
	skip "qemu-system-x86_64 not found (Debian package qemu-system-x86)"
busybox=
for b in /bin/busybox /usr/bin/busybox; do
	[ -x "$b" ] && { busybox=$b; break; }
done
[ -n "$busybox" ] || skip "busybox not found (Debian package busybox-static)"
# The initramfs has no libc, so only a static busybox runs there.
libs=$(LC_ALL=C ldd "$busybox" 2>&1 || true)
[[ $libs == *'not a dynamic executable'* ]] ||
	skip "$busybox is dynamically linked (install busybox-static)"
command -v rdma >/dev/null ||
	skip "the rdma tool is not installed (Debian package iproute2)"
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
	skip "needs apt-get and dpkg-deb to fetch Debian's kernel"
fi

cache=${KANEL_RXE_CACHE:-${HOME:-/root}/.cache/kanel-rxe}
mkdir -p "$cache" || skip "cannot create the cache directory $cache"

# --- kernel and module initramfs, built once per kernel package ----------

# Modules the guest loads (their dependencies come along, from
# modules.dep): virtio-pci and 9p for the file systems, dummy for the
# netdev under rxe, rdma_ucm for librdmacm's /dev/infiniband/rdma_cm,
# overlay to make the host's root writable in the guest.
# veth and sch_netem are for tests/net/ (namespaces joined by veth pairs,
# netem's delay and loss), which the host kernel here does not have.
# Debian's 6.1 builds all of them, virtio_pci included, as modules.
# crc32_generic goes before rdma_rxe, or "rdma link add" fails with
# ENOENT: rxe asks the crypto API for "crc32", and nothing autoloads
# modules in this guest.
wanted=(virtio_pci 9pnet_virtio 9p overlay dummy crc32_generic rdma_ucm rdma_rxe
	veth sch_netem)
# What a cached build was made from: a change to it (or to what
# build_kernel makes: bump the number) rebuilds the cache.
stamp="2 ${wanted[*]}"

# Runs as root, or through sudo where that needs no password (no stdin).
as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

# Serialises the runs sharing this cache while they update the package
# lists or build the kernel; held until this script ends.
lock() {
	exec 9>"$cache/lock"
	flock 9
}

apt_updated=
apt_update() { # at most once a run; fails if already done
	[ -z "$apt_updated" ] || return 1
	apt_updated=1
	lock
	note "running apt-get update"
	as_root apt-get update -q >&2 || true
}

kernel_pkg() { # prints the kernel package linux-image-amd64 depends on
	apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n1 || true
}

pkg=${KANEL_RXE_KERNEL_PKG:-}
if [ -z "$pkg" ]; then
	pkg=$(kernel_pkg)
	# A fresh machine may have no package lists yet.
	[ -n "$pkg" ] || ! apt_update || pkg=$(kernel_pkg)
fi
if [ -z "$pkg" ]; then
	# Offline, or no package lists: any kernel built before will do.
	ready=$(ls -d "$cache"/linux-image-*/ready 2>/dev/null | sort -V | tail -n1 || true)
	[ -n "$ready" ] ||
		skip "cannot resolve linux-image-amd64 (no apt lists?) and nothing is cached in $cache"
	pkg=$(basename "$(dirname "$ready")")
fi
kdir=$cache/$pkg

# Fetches $pkg and writes DIR/vmlinuz, DIR/modules.cpio.gz (busybox and
# the modules, with lib/modules/order listing them in load order) and
# DIR/kver.  The guest's /init is not in there: it is added at each run
# (see below), so that editing it here needs no rebuild.
build_kernel() { # DIR
	local dir=$1 tmp deb kver
	tmp=$(mktemp -d "$cache/build.XXXXXX")
	note "fetching $pkg into $cache (once per kernel)"
	# apt-get download writes into the current directory.  As root it
	# warns that user _apt cannot reach this private one: harmless.
	if ! (cd "$tmp" && apt-get download -q "$pkg") >"$tmp/apt.log" 2>&1; then
		# The lists may be missing or stale (a superseded security
		# update is gone from the mirror): refresh them and retry.
		if apt_update; then
			[ -n "${KANEL_RXE_KERNEL_PKG:-}" ] || pkg=$(kernel_pkg)
			(cd "$tmp" && apt-get download -q "$pkg") >"$tmp/apt.log" 2>&1 || true
		fi
	fi
	deb=$(ls "$tmp"/*.deb 2>/dev/null | head -n1 || true)
	if [ -z "$deb" ]; then
		sed 's/^/  apt: /' "$tmp/apt.log" >&2
		skip "cannot download the kernel package $pkg"
	fi
	# Only the kernel and its modules: the package is 400 MB unpacked.
	dpkg-deb --fsys-tarfile "$deb" |
		tar -x -C "$tmp" --wildcards './boot/vmlinuz-*' './boot/config-*' \
			'./lib/modules/*' ||
		die "cannot unpack $deb"
	rm -f "$deb"
	kver=$(ls "$tmp/lib/modules")
	[ -f "$tmp/boot/vmlinuz-$kver" ] || die "$pkg has no /boot/vmlinuz-$kver"
	# Under TCG the kernel's own decompression of its xz payload takes
	# seconds at every boot.  qemu boots the uncompressed ELF vmlinux
	# directly through its PVH entry point, so unpack it once here.  If
	# that does not work out (no xz-utils; busybox's xz lacks the x86
	# BCJ filter), the bzImage boots too, only slower.
	local off
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$tmp/boot/vmlinuz-$kver" |
		head -n1 | cut -d: -f1 || true)
	if [ -n "$off" ] && command -v xz >/dev/null &&
		grep -q '^CONFIG_PVH=y' "$tmp/boot/config-$kver"; then
		# xz complains about the bytes after its stream; the ELF
		# magic tells whether what came before is whole.
		tail -c +$((off + 1)) "$tmp/boot/vmlinuz-$kver" |
			xz -dc >"$tmp/vmlinux" 2>/dev/null || true
		[ "$(head -c 4 "$tmp/vmlinux" | tr -d '\177')" = ELF ] ||
			rm -f "$tmp/vmlinux"
	fi
	# The package ships no modules.dep (its postinst runs depmod); the
	# one in busybox spares us needing kmod.
	"$busybox" depmod -b "$tmp" "$kver" || die "depmod failed for $kver"

	# Load order: every module after all it depends on.
	local -A path=() deps=() seen=()
	local -a order=()
	local line mod m d f
	while IFS= read -r line; do
		mod=${line%%:*}
		m=${mod##*/}
		m=${m%%.ko*}
		path[$m]=$mod
		deps[$m]=
		for d in ${line#*:}; do
			d=${d##*/}
			deps[$m]+=" ${d%%.ko*}"
		done
	done <"$tmp/lib/modules/$kver/modules.dep"
	visit() {
		local m=$1 d
		[ -z "${seen[$m]:-}" ] || return 0
		seen[$m]=1
		[ -n "${path[$m]:-}" ] || die "$pkg has no module $m (built in now?)"
		for d in ${deps[$m]}; do visit "$d"; done
		order+=("$m")
	}
	for m in "${wanted[@]}"; do visit "$m"; done

	local root=$tmp/initramfs
	mkdir -p "$root"/{bin,dev,proc,sys,tmp,newroot,out,lib/modules}
	cp "$busybox" "$root/bin/busybox"
	for m in "${order[@]}"; do
		f=$tmp/lib/modules/$kver/${path[$m]}
		case $f in
		*.ko) cp "$f" "$root/lib/modules/$m.ko" ;;
		*.ko.xz) "$busybox" xz -dc "$f" >"$root/lib/modules/$m.ko" ;;
		*.ko.gz) gzip -dc "$f" >"$root/lib/modules/$m.ko" ;;
		*) die "cannot unpack module $f (knows .ko, .ko.xz, .ko.gz)" ;;
		esac
		echo "$m" >>"$root/lib/modules/order"
	done
	(cd "$root" && find . | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) |
		gzip -1 >"$tmp/modules.cpio.gz"
	mkdir -p "$dir"
	mv "$tmp/boot/vmlinuz-$kver" "$dir/vmlinuz"
	[ ! -f "$tmp/vmlinux" ] || mv "$tmp/vmlinux" "$dir/vmlinux"
	mv "$tmp/modules.cpio.gz" "$dir/modules.cpio.gz"
	echo "$kver" >"$dir/kver"
	echo "$stamp" >"$dir/stamp"
	rm -rf "$tmp"
	note "$pkg: kernel $kver; modules in load order: ${order[*]}"
}

if [ ! -f "$kdir/ready" ] || [ "$(cat "$kdir/stamp")" != "$stamp" ]; then
	# A concurrent run building the same kernel: wait, and look again.
	lock
	if [ ! -f "$kdir/ready" ] || [ "$(cat "$kdir/stamp")" != "$stamp" ]; then
		# What a build that died left behind.
		rm -rf "$kdir" "$kdir.new" "$cache"/build.*
		build_kernel "$kdir.new"
		touch "$kdir.new/ready"
		mv "$kdir.new" "$kdir"
	fi
fi
exec 9>&- # the lock, if taken: the VM needs none
kver=$(cat "$kdir/kver")

# --- the run -------------------------------------------------------------

if [ -n "$out" ]; then
	mkdir -p "$out"
	out=$(cd "$out" && pwd)
	rm -f "$out"/{output,status,status.tmp,started,avx2,guest.log} \
		"$out"/{console.log,qemu.log,cmd.sh,initrd}
	keep_out=1
else
	out=$(mktemp -d "${TMPDIR:-/tmp}/kanel-rxe.XXXXXX")
	keep_out=
fi
qpid=
cleanup() {
	if [ -n "$qpid" ]; then
		kill "$qpid" 2>/dev/null || true
		wait "$qpid" 2>/dev/null || true
	fi
	if [ -z "$keep_out" ]; then rm -rf "$out"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The guest's /init (busybox sh).  It reports through the read-write 9p
# share mounted on /out: guest.log (its own diagnostics), started (written
# just before CMD runs), output (CMD's stdout and stderr), status (CMD's
# exit status, written last).  No status means the guest broke before or
# while running CMD; console.log (the serial console) then tells more.
guest_init() {
	cat <<-'EOF'
	#!/bin/busybox sh
	/bin/busybox --install -s /bin
	export PATH=/bin
	mount -t devtmpfs devtmpfs /dev
	# Built without root, the initramfs has no /dev/console node, so
	# the kernel could give us no stdio before devtmpfs.
	exec </dev/console >/dev/console 2>&1
	mount -t proc proc /proc
	mount -t sysfs sysfs /sys

	say() { echo "rxe-guest: $*"; [ ! -w /out/guest.log ] || echo "$*" >>/out/guest.log; }
	halt() { sync; poweroff -f; sleep 60; }
	# rxe logs the dummy's speed at every port query: noise.
	dmesg_tail() {
		dmesg | grep -v 'speed is unknown' | tail -n 30 |
			sed 's/^/dmesg: /' >>/out/guest.log
	}
	fail() { say "FAILED: $*"; dmesg_tail; halt; }

	errs=
	while read -r m; do
		insmod "/lib/modules/$m.ko" 2>/tmp/err ||
			errs="$errs insmod $m: $(cat /tmp/err);"
	done </lib/modules/order
	o=trans=virtio,version=9p2000.L,msize=262144
	mount -t 9p -o $o kanel_out /out ||
		{ echo "rxe-guest: FAILED: cannot mount the out share;$errs"; halt; }
	: >/out/guest.log
	[ -z "$errs" ] || say "$errs"
	# The host's root, read-only.  cache=loose is safe as long as
	# nothing on the host changes under a running test, and it lets
	# the page cache serve binaries and libraries.
	mkdir -p /host /rw
	mount -t 9p -o $o,ro,cache=loose kanel_root /host ||
		fail "cannot mount the host root"
	# Made writable with an overlay whose changes stay in guest memory,
	# so that a test may write where it would on the host (its build
	# directory, /tmp) and the host sees none of it.
	mount -t tmpfs -o mode=755 tmpfs /rw && mkdir /rw/upper /rw/work &&
		mount -t overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work \
			overlay /newroot ||
		{ say "no overlay: the root stays read-only"; mount -o bind /host /newroot; }
	for d in proc sys dev; do
		mount -o bind /$d /newroot/$d || fail "cannot bind /$d"
	done
	# Empty, as after a boot; /tmp is the host's (through the overlay).
	mkdir -p /dev/shm /dev/pts
	mount -t devpts devpts /newroot/dev/pts &&
		mount -t tmpfs -o mode=1777 tmpfs /newroot/dev/shm &&
		mount -t tmpfs -o mode=755 tmpfs /newroot/run ||
		fail "cannot mount /dev/pts, /dev/shm or /run"

	# Verbs pins memory; root may anyway, but a CMD that drops
	# privileges should not trip on the default 8 MB.
	ulimit -l unlimited
	ip link set lo up
	ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy
	ip addr add @ADDR@/24 dev dummy0 && ip link set dummy0 up ||
		fail "cannot set up dummy0"
	# rdma is the host's (iproute2), so it runs in the host's root.
	chroot /newroot rdma link add rxe0 type rxe netdev dummy0 >/tmp/err 2>&1 ||
		fail "rdma link add rxe0: $(cat /tmp/err); modules: $(cut -d' ' -f1 /proc/modules | tr '\n' ' ')"
	links=$(chroot /newroot rdma link show 2>&1)
	case $links in
	*"rxe0/1 state ACTIVE"*) ;;
	*) fail "rxe0 is not ACTIVE: $links" ;;
	esac

	cp /out/cmd.sh /newroot/run/kanel-cmd.sh || fail "no cmd.sh in /out"
	grep -c -w avx2 /proc/cpuinfo >/out/avx2
	cut -d' ' -f1 /proc/uptime >/out/started
	chroot /newroot /usr/bin/env -i \
		PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/tmp LANG=C.UTF-8 KANEL_RDMA_ADDR=@ADDR@ KANEL_IN_RXE_VM=1 \
		KANEL_RDMA_NETDEV=dummy0 \
		/bin/sh /run/kanel-cmd.sh </dev/null >/out/output 2>&1
	rc=$?
	if [ $rc -ne 0 ]; then
		say "CMD exited $rc; rdma link: $(chroot /newroot rdma link show 2>&1)"
		dmesg_tail
	fi
	echo $rc >/out/status.tmp && mv /out/status.tmp /out/status
	halt
	EOF
}

# The initrd: the cached busybox and modules, then a second cpio archive
# with /init (the kernel unpacks concatenated archives in turn).
initdir=$(mktemp -d "${TMPDIR:-/tmp}/kanel-rxe-init.XXXXXX")
guest_init | sed "s/@ADDR@/$addr/g" >"$initdir/init"
chmod 755 "$initdir/init"
{
	cat "$kdir/modules.cpio.gz"
	(cd "$initdir" && echo init | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) | gzip -1
} >"$out/initrd"
rm -rf "$initdir"

# CMD goes to the guest as a script in the out share, not on the kernel
# command line: no length limit and no second layer of quoting.
quote() { # ARG: ARG as one single-quoted word for any sh
	local s=${1//\'/\'\\\'\'}
	printf "'%s'" "$s"
}
{
	echo '# written by tests/rxe/vm.sh; run by the guest in the host root'
	while IFS= read -r v; do
		case $v in
		KANEL_RDMA_ADDR | KANEL_IN_RXE_VM | KANEL_RDMA_NETDEV) ;;
		KANEL_* | *SAN_OPTIONS) echo "export $v=$(quote "${!v}")" ;;
		esac
	done < <(compgen -e)
	echo "cd $(quote "$PWD") || exit 1"
	printf 'exec'
	for a in "$@"; do printf ' %s' "$(quote "$a")"; done
	echo
} >"$out/cmd.sh"

# -cpu max: under TCG that is every x86 feature qemu emulates (AVX2 among
# them since qemu 7.2), so the kernels' SIMD paths run as they do on the
# host.  mitigations=off: the guest runs nothing untrusted, and under TCG
# the page table isolation would cost on every system call.  The serial
# console goes to a file, not to our stdio: qemu would put a terminal in
# raw mode, and the console is only wanted when something fails.
accel=${KANEL_RXE_ACCEL:-tcg}
esc() { printf '%s' "${1//,/,,}"; } # qemu option values double commas
kernel=$kdir/vmlinuz
[ ! -f "$kdir/vmlinux" ] || kernel=$kdir/vmlinux
# qboot (qemu's minimal firmware) gets to the kernel about half a second
# sooner than SeaBIOS under TCG.
bios=()
qboot=/usr/share/qemu/qboot.rom
[ ! -f "$qboot" ] || bios=(-bios "$qboot")
"$qemu" -accel "$accel" -cpu max -m 2048 -smp 2 "${bios[@]}" \
	-nodefaults -display none -no-reboot \
	-serial "file:$(esc "$out/console.log")" \
	-kernel "$kernel" -initrd "$out/initrd" \
	-append "console=ttyS0 quiet panic=-1 mitigations=off" \
	-virtfs local,path=/,mount_tag=kanel_root,security_model=none,readonly=on,multidevs=remap \
	-virtfs "local,path=$(esc "$out"),mount_tag=kanel_out,security_model=none" \
	</dev/null >"$out/qemu.log" 2>&1 &
qpid=$!

booted=
timed_out=
deadline=$((SECONDS + timeout))
while kill -0 "$qpid" 2>/dev/null; do
	if [ -z "$booted" ] && [ -s "$out/started" ]; then
		booted=$EPOCHREALTIME
	fi
	if ((SECONDS >= deadline)); then
		timed_out=1
		kill "$qpid" 2>/dev/null || true
		break
	fi
	sleep 0.2
done
qrc=0
wait "$qpid" || qrc=$?
qpid=
[ -n "$booted" ] || [ ! -s "$out/started" ] || booted=$EPOCHREALTIME

[ ! -f "$out/output" ] || cat "$out/output"

if [ -n "$booted" ]; then
	avx2=no
	[ "$(cat "$out/avx2")" = 0 ] || avx2=yes
	note "kernel $kver, $accel, avx2 $avx2: command started after $(secs "$t0" "$booted") s, $(secs "$t0") s in all"
else
	note "kernel $kver, $accel: the command did not start, $(secs "$t0") s in all"
fi

status=$(cat "$out/status" 2>/dev/null || true)
if [ -n "$timed_out" ] || [[ ! $status =~ ^[0-9]+$ ]] || [ "$status" != 0 ]; then
	# Whatever the guest said about itself, for the CI log.
	[ ! -s "$out/guest.log" ] || sed 's/^/  guest: /' "$out/guest.log" >&2
fi
if [ -n "$timed_out" ]; then
	die "timed out after $timeout s; killed the VM"
fi
if [[ ! $status =~ ^[0-9]+$ ]]; then
	[ ! -s "$out/qemu.log" ] || sed 's/^/  qemu: /' "$out/qemu.log" >&2
	# Without the out share the console is all the guest could say.
	if [ ! -s "$out/guest.log" ] && [ -s "$out/console.log" ]; then
		tail -n 40 "$out/console.log" | sed 's/^/  console: /' >&2
	fi
	die "the VM ended (qemu status $qrc) without running the command to its end"
fi
rm -f "$out/initrd"
exit "$status"
