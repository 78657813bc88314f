#!/bin/sh
# preload-pairs.sh - ns per ibv_reg_mr + ibv_dereg_mr pair of a reused buffer, natively and under
# libodpx-preload.so (explicit and pin modes), for 4 KiB, 64 KiB and 1 MiB, in one boot of the
# Soft-RoCE guest; one key=value line per configuration, then the ratios native / drop-in.
#
#   s=$(mktemp -d) && cp build/libodpx-preload.so build/verbs-permsg "$s" &&
#   cp bench/preload-pairs.sh "$s/run.sh" && tests/vm/odpx-vm run "$s"; cat "$s/guest.log"
#
# N pairs per configuration: PAIRS (default 200; native pairs cost milliseconds under TCG).
set -eu
cd "$(dirname "$0")"
pairs=${PAIRS:-200}
if [ ! -e /sys/class/infiniband/rxe0 ]; then
	modprobe rdma_rxe
	rdma link add rxe0 type rxe netdev lo
	i=0
	until grep -qx '0000:0000:0000:0000:0000:ffff:7f00:0001' \
		/sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null; do
		i=$((i + 1)); [ $i -lt 200 ] || { echo "no loopback GID on rxe0"; exit 1; }
		sleep 0.05
	done
fi
echo "kernel=$(uname -r) rdma-core=$(dpkg-query -W -f '${Version}' rdma-core) nproc=$(nproc)"
for size in 4096 65536 1048576; do
	for cfg in native explicit pin; do
		if [ $cfg = native ]; then
			line=$(./verbs-permsg bench $size $pairs)
		else
			line=$(env LD_PRELOAD="$PWD/libodpx-preload.so" ODPX_MODE=$cfg \
				./verbs-permsg bench $size $pairs)
		fi
		med=$(echo "$line" | sed -n 's/.*median_ns=\([0-9]*\).*/\1/p')
		echo "preload-pairs config=$cfg ${line#pair }"
		eval "med_$cfg=$med"
	done
	awk -v s=$size -v n="$med_native" -v e="$med_explicit" -v p="$med_pin" 'BEGIN {
		printf "preload-pairs size=%d native/explicit=%.0fx native/pin=%.0fx\n", s, n / e, n / p }'
done
