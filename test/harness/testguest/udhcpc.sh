#!/bin/sh
# busybox udhcpc's script in the test guest (testguest.dhcp=1): applies
# the lease and prints it on the console for tests.
case "$1" in
bound | renew)
	# IPv4 only: the link-local IPv6 address stays (Spoofing sends IPv6).
	ip -4 addr flush dev "$interface"
	ip addr add "$ip/$mask" dev "$interface"
	[ -z "$mtu" ] || ip link set "$interface" mtu "$mtu"
	[ -z "$router" ] || ip route add default via "${router%% *}" dev "$interface"
	echo "TESTGUEST DHCP $ip/$mask router $router mtu $mtu hostname $hostname"
	;;
esac
