#!/bin/sh
# guest-pair.sh - the driver of each guest of `odpx-vm pair`, put into its share as run.sh
# beside pair.sh (the test script), bin/ and config (ROLE, LOCAL_IP, PEER_IP).  It brings eth0
# up with LOCAL_IP/24 on the guests' private network, makes rxe0 on it, waits for the port to
# be ACTIVE with the GID ::ffff:LOCAL_IP, then runs pair.sh with ROLE, LOCAL_IP, PEER_IP, GID
# (that GID's index) and BIN exported; its exit status is pair.sh's.
set -u
cd /mnt/host || exit 1
. ./config
export ROLE LOCAL_IP PEER_IP BIN=/mnt/host/bin PATH="/mnt/host/bin:$PATH"
modprobe virtio_net && ip link set eth0 up && ip addr add "$LOCAL_IP/24" dev eth0 ||
	{ echo "guest $ROLE: eth0 with $LOCAL_IP could not be set up"; exit 1; }
modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0 ||
	{ echo "guest $ROLE: rxe0 on eth0 could not be made"; exit 1; }
hex=$(echo "$LOCAL_IP" | awk -F. '{ printf "%02x%02x:%02x%02x", $1, $2, $3, $4 }')
port=/sys/class/infiniband/rxe0/ports/1
GID=
i=0
while [ $i -lt 400 ]; do
	if grep -q ACTIVE "$port/state" 2>/dev/null; then
		g=$(grep -lx "0000:0000:0000:0000:0000:ffff:$hex" "$port"/gids/* 2>/dev/null | head -n1)
		[ -n "$g" ] && GID=${g##*/} && break
	fi
	sleep 0.05
	i=$((i + 1))
done
[ -n "$GID" ] || { echo "guest $ROLE: no ACTIVE rxe0 with GID ::ffff:$LOCAL_IP after 20 s"; exit 1; }
export GID
echo "guest $ROLE: $LOCAL_IP, rxe0 on eth0, GID index $GID, $(nproc) vCPU," \
	"$(awk '/MemTotal/ { printf "%d MiB", $2 / 1024 }' /proc/meminfo)"
sh ./pair.sh
