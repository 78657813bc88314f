#!/bin/sh
# pair-preload.sh - the drop-in across two guests (odpx-vm pair): ib_write_bw and verbs-permsg
# (registration around every RDMA WRITE and READ) from B (client) to A (server), natively and
# under libodpx-preload.so in pin mode.  Both sides check their own program's exit status; under
# the drop-in also its exit line: mode pin, registrations served, none passed through.
# (Explicit ODP is left out here: the path MTU between the guests is 1024, and rxe's ODP copy
# puts every packet at the start of its page; see tests/dev-rxe-odp-offset.c.)
set -u
fail=0
lib=$BIN/libodpx-preload.so

# run LOG CFG CMD...: CMD natively (CFG native) or under the drop-in in mode CFG
run() {
	log=$1 cfg=$2
	shift 2
	if [ "$cfg" = native ]; then
		"$@" > "$log" 2>&1
	else
		env LD_PRELOAD="$lib" ODPX_PRELOAD_VERBOSE=1 ODPX_MODE="$cfg" "$@" > "$log" 2>&1
	fi
}

# check NAME CFG RC LOG OK: exit status 0, OK in the output, the drop-in's line when it ran
check() {
	name=$1 cfg=$2 rc=$3 log=$4 ok=$5
	line=$(grep -o -m1 'libodpx-preload: pid .*' "$log")
	if [ "$rc" != 0 ] || ! grep -q -- "$ok" "$log"; then
		echo "FAIL  $ROLE $name ($cfg): exit $rc"; sed 's/^/    | /' "$log"; fail=1; return
	fi
	if [ "$cfg" != native ]; then
		case $line in
		*"mode $cfg "*"passthrough 0 "*) ;;
		*) echo "FAIL  $ROLE $name ($cfg): drop-in line: ${line:-none}"; fail=1; return ;;
		esac
		served=$(echo "$line" | sed -n 's/.*served \([0-9]*\),.*/\1/p')
		[ "${served:-0}" -gt 0 ] || { echo "FAIL  $ROLE $name ($cfg): nothing served"; fail=1; return; }
	fi
	echo "PASS  $ROLE $name ($cfg)${line:+: ${line#*: }}"
}

# the client connects as soon as the server listens: retried for 60 s while it refuses
retry() {
	i=0
	while :; do
		"$@" && return 0
		i=$((i + 1))
		[ $i -lt 60 ] || return 1
		sleep 1
	done
}

n=0
for cfg in native pin; do
	n=$((n + 1))
	p=$((18700 + n))
	if [ "$ROLE" = server ]; then
		run /tmp/bw.log $cfg ib_write_bw -d rxe0 -x "$GID" -F -n 20 -p $p; rc=$?
		check ib_write_bw $cfg $rc /tmp/bw.log '#bytes'
		run /tmp/pm.log $cfg verbs-permsg -d rxe0 -g "$GID" -s; rc=$?
		check verbs-permsg $cfg $rc /tmp/pm.log 'client done'
	else
		retry run /tmp/bw.log $cfg ib_write_bw -d rxe0 -x "$GID" -F -n 20 -p $p "$PEER_IP"; rc=$?
		check ib_write_bw $cfg $rc /tmp/bw.log '#bytes'
		run /tmp/pm.log $cfg verbs-permsg -d rxe0 -g "$GID" -c "$PEER_IP" xfer 20 65536; rc=$?
		check "verbs-permsg xfer" $cfg $rc /tmp/pm.log 'every byte back'
	fi
done
exit $fail
