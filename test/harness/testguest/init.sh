#!/bin/sh
# PID 1 of the vmop test guest (see testguest.go). Tests read the lines
# starting with TESTGUEST from the serial console.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

# Debian builds these drivers as modules; the list is in load order.
while read -r m; do
	insmod "$m" || echo "TESTGUEST insmod $m failed"
done </etc/modules

case " $(cat /proc/cmdline) " in
*" testguest.ignore_acpi=1 "*)
	echo "TESTGUEST ignoring ACPI power button"
	;;
*)
	# The button driver turns the ACPI power button into an input event;
	# acpid runs /etc/acpi/PWRF/00000080 for it. acpid only watches the
	# event devices present when it starts, hence after insmod.
	acpid -d -c /etc/acpi &
	;;
esac

# A stand-in for qemu-guest-agent: keeping its virtio port open tells qemu
# the agent is there (VSERPORT_CHANGE); it answers guest-sync-delimited as
# the agent does (0xFF, then the id), and a guest-shutdown command powers
# off. guest-fsfreeze-freeze and -thaw answer as for one file system (the
# initramfs has none to freeze) and say so on the console. Reads end at
# once while no host side is connected, hence the retry.
agent() {
	frozen=0
	for d in /sys/class/virtio-ports/*; do
		[ "$(cat "$d/name" 2>/dev/null)" = org.qemu.guest_agent.0 ] || continue
		exec 3<>"/dev/${d##*/}"
		echo "TESTGUEST AGENT"
		while :; do
			if read -r line <&3; then
				case "$line" in
				*guest-sync-delimited*)
					id=${line#*\"id\":}
					id=${id%%[!0-9]*}
					printf '\377{"return": %s}\n' "$id" >&3
					;;
				*guest-shutdown*) [ "$1" = deaf ] || /etc/acpi/PWRF/00000080 ;;
				*guest-fsfreeze-freeze*)
					frozen=1
					echo "TESTGUEST FROZEN"
					echo '{"return": 1}' >&3
					;;
				*guest-fsfreeze-thaw*)
					echo "{\"return\": $frozen}" >&3
					[ $frozen = 0 ] || echo "TESTGUEST THAWED"
					frozen=0
					;;
				esac
			else
				sleep 0.1
			fi
		done
	done
}
case " $(cat /proc/cmdline) " in
*" testguest.agent=1 "*) agent & ;;
*" testguest.agent=deaf "*) agent deaf & ;;
esac

# A TCP echo service on port 7 (the echo protocol's) for port forward
# tests, on the first NIC when the VM has one: the guest takes the address
# that slirp's DHCP server would hand out first and that its host forwards
# connect to, or with testguest.dhcp=1 asks a DHCP server (a pod network's).
if [ -e /sys/class/net/eth0 ]; then
	ip link set eth0 up
	case " $(cat /proc/cmdline) " in
	*" testguest.dhcp=1 "*)
		udhcpc -i eth0 -n -q -t 20 -T 3 -s /etc/udhcpc.sh >/dev/console 2>&1 || echo "TESTGUEST DHCP failed"
		;;
	*) ip addr add 10.0.2.15/24 dev eth0 ;;
	esac
	nc -ll -p 7 -e cat &
	# The line promises a listener: wait for port 7 (0007) in state LISTEN
	# (0A), on IPv4 or dual-stack, before saying so.
	until grep -qs ':0007 [0-9A-F]*:0000 0A' /proc/net/tcp /proc/net/tcp6; do sleep 0.05; done
	echo "TESTGUEST ECHO 7"
fi

# testguest.screen=1: a known display for display tests (white on blue:
# the erase takes the colours set), and the display's keyboard answered on
# the serial console. The VT is cooked: it echoes what is typed. With
# ctrl-alt-del 0 the kernel signals init (SIGINT) instead of rebooting.
case " $(cat /proc/cmdline) " in
*" testguest.screen=1 "*)
	echo 0 >/proc/sys/kernel/ctrl-alt-del
	trap 'echo "TESTGUEST CTRL-ALT-DEL"' INT
	printf '\033[1;37;44m\033[2J\033[HTESTGUEST SCREEN\n' >/dev/tty1
	while read -r line; do
		echo "TESTGUEST KEYS $line" >/dev/console
	done </dev/tty1 &
	# /dev/input/mice merges every mouse into 3-byte PS/2 packets; bit 0
	# of the first is the left button.
	mouse() {
		while read -r m; do insmod "$m" 2>/dev/null; done </etc/modules.screen
		while :; do
			set -- $(dd if=/dev/input/mice bs=3 count=1 2>/dev/null | od -An -tu1)
			[ -n "$1" ] && [ $(($1 & 1)) = 1 ] && echo "TESTGUEST MOUSE LEFT" >/dev/console
		done
	}
	mouse &
	;;
esac

lock_cd() {
	until [ -e /dev/sr0 ]; do sleep 0.1; done
	exec 4</dev/sr0
	echo "TESTGUEST CD LOCKED"
	sleep "$1"
	exec 4<&-
	echo "TESTGUEST CD RELEASED"
}
for p in $(cat /proc/cmdline); do
	case "$p" in
	testguest.lock_cd=*) lock_cd "${p#*=}" & ;;
	esac
done

# testguest.boots=1: count boots in the counter sector of the disk that has
# one (see disk.go), so that a test sees what the guest wrote survive.
count_boots() {
	i=0
	while [ $i -lt 100 ]; do
		for d in /dev/vd?; do
			[ -b "$d" ] || continue
			dd if="$d" of=/tmp/boots bs=512 skip=90112 count=1 2>/dev/null || continue
			read -r magic n </tmp/boots
			[ "$magic" = TESTGUEST-BOOTS ] || continue
			n=$((n + 1))
			echo "TESTGUEST-BOOTS $n" | dd of="$d" bs=512 seek=90112 count=1 conv=sync,fsync 2>/dev/null
			echo "TESTGUEST BOOT $n"
			return
		done
		i=$((i + 1))
		sleep 0.1
	done
	echo "TESTGUEST BOOT no counter found"
}
case " $(cat /proc/cmdline) " in
*" testguest.boots=1 "*) count_boots ;;
esac

# testguest.records=N: write N records (see records.go) to each disk but
# the first, one after the other, each synced (dd conv=fsync: a flush the
# host must honour) to every disk before the console says so. The records
# an earlier boot wrote to every disk, from the first on, are kept: the
# guest says where it goes on (RECORDS RESUME), so that a test sees
# whether a record it was told is synced went missing. With
# testguest.record_pause=S it sleeps S seconds after each.
record() { yes "$(printf 'RECORD %08d' $1)" | head -c 65536 >/tmp/record; }
write_records() {
	until [ -b /dev/vdb ]; do sleep 0.1; done
	n=1
	while [ $n -le "$1" ]; do
		record $n
		for d in /dev/vd[b-z]; do
			dd if="$d" bs=65536 skip=$((n - 1)) count=1 2>/dev/null | cmp -s - /tmp/record || break 2
		done
		n=$((n + 1))
	done
	echo "TESTGUEST RECORDS RESUME $n"
	while [ $n -le "$1" ]; do
		record $n
		for d in /dev/vd[b-z]; do
			if ! dd if=/tmp/record of="$d" bs=65536 seek=$((n - 1)) count=1 conv=fsync 2>/dev/null; then
				echo "TESTGUEST RECORD $n failed on $d"
				return
			fi
		done
		echo "TESTGUEST RECORD $n"
		n=$((n + 1))
		[ -z "$2" ] || sleep "$2"
	done
	echo "TESTGUEST RECORDS DONE"
}
records= pause=
for p in $(cat /proc/cmdline); do
	case "$p" in
	testguest.records=*) records="${p#*=}" ;;
	testguest.record_pause=*) pause="${p#*=}" ;;
	esac
done
[ -z "$records" ] || write_records "$records" "$pause" &

# Hot-plugged CPUs arrive offline; on a full distribution a udev rule onlines
# them. Unplug needs nothing here: the kernel offlines and ejects the CPU
# itself on the ACPI eject request.
cpus=
online_cpus() {
	for f in /sys/devices/system/cpu/cpu[0-9]*/online; do
		# The file vanishes while the kernel ejects that CPU.
		{ read -r v <"$f" && [ "$v" = 1 ] || echo 1 >"$f"; } 2>/dev/null
	done
	n=$(grep -c ^processor /proc/cpuinfo)
	if [ "$n" != "$cpus" ]; then
		cpus=$n
		echo "TESTGUEST CPUS $n"
	fi
}

# "spoof IP DST MAC" (see Spoofing in spoof.go): the guest pings DST as
# itself, then poses as another: from address IP, with IPv6 to every node
# of its link, from MAC; then pings as itself again. Each has its own
# size, so that a capture tells them apart. While it poses its router's
# MAC is fixed, so that it sends its pings even if its ARP goes unanswered.
spoof() {
	ping -c 2 -w 3 -s 100 "$2"
	gw=$(word_after via $(ip route show default))
	router=$(word_after lladdr $(ip neigh show "$gw" dev eth0))
	arp -i eth0 -s "$gw" "$router"
	ip addr add "$1/32" dev eth0
	ping -c 2 -w 3 -s 101 -I "$1" "$2"
	ip addr del "$1/32" dev eth0
	ping6 -c 2 -w 3 -I eth0 ff02::1
	own=$(cat /sys/class/net/eth0/address)
	ip link set eth0 address "$3"
	# A new MAC flushes the neighbours.
	arp -i eth0 -s "$gw" "$router"
	ping -c 2 -w 3 -s 102 "$2"
	ip link set eth0 address "$own"
	arp -i eth0 -d "$gw"
	ping -c 2 -w 3 -s 104 "$2"
}

# word_after W WORDS...: the word after W.
word_after() {
	w=$1
	shift
	while [ $# -gt 1 ]; do
		[ "$1" = "$w" ] && echo "$2" && return
		shift
	done
}

# Serial console input: the line "ping X" typed on the console is answered
# with "TESTGUEST PONG X", so that a test sees its input reach the guest.
# (The tty echoes the line too, and turns the Enter key's CR into LF.)
cr=$(printf '\r')
while read -r line; do
	line=${line%"$cr"}
	case "$line" in
	"ping "*) echo "TESTGUEST PONG ${line#ping }" ;;
	panic) echo c >/proc/sysrq-trigger ;;
	"spoof "*)
		spoof ${line#spoof } >/dev/null 2>&1 </dev/null
		echo "TESTGUEST SPOOFED"
		;;
	esac
done </dev/console &

online_cpus
echo "TESTGUEST READY"
while :; do
	sleep 0.2
	online_cpus
done
