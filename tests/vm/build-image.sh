#!/bin/sh
# SPDX-License-Identifier: MIT
# build-image.sh - the recipe of the Soft-RoCE test guest: a Debian root file system in an ext4
# image, the Debian kernel, and a small initramfs of our own that mounts the image.
#
#   build-image.sh SUITE MIRROR OUTDIR
#
# SUITE is "sid", or "trixie" with the kernel from trixie-backports.  Run as root by odpx-vm,
# which hashes this file (and guest-init, initramfs-init) into the cache key, holds the lock,
# and renames OUTDIR into the cache when this exits 0.  OUTDIR ends up holding:
#   vmlinuz initramfs.cpio rootfs.img   what qemu boots (root on virtio-blk, snapshot=on)
#   suite kernel packages.txt           what was built: for `odpx-vm info`
#   debootstrap.log apt.log             the long logs of the two slow steps
# The unpacked root tree (OUTDIR/rootfs) is deleted once it is in the image.
# Progress goes to stdout, one line a step; a failure ends with one "build-image: ..." line.
set -eu

suite=$1 mirror=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
root=$out/rootfs

# The guest's packages.  No compiler: test programs are built on the host and run unchanged.
# python3-pyverbs brings rdma-core's own test suite (/usr/share/doc/rdma-core/tests).
pkgs="linux-image-amd64 rdma-core ibverbs-providers ibverbs-utils libibverbs-dev perftest
      iproute2 kmod liburing-dev busybox-static procps rdmacm-utils libfabric-bin openmpi-bin
      openssh-server python3-pyverbs"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
die() { echo "build-image: $*" >&2; exit 1; }
# the first error line of an apt or debootstrap log, else its last line
why() {
	grep -m1 '^E: ' "$1" 2>/dev/null || grep -m1 -E 'Failed|Couldn.t' "$1" 2>/dev/null ||
		tail -n1 "$1" 2>/dev/null
}

unmount_all() {
	for m in dev/pts dev sys proc; do
		if mountpoint -q "$root/$m" 2>/dev/null; then
			umount "$root/$m" || umount -l "$root/$m"
		fi
	done
}
trap unmount_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

case $suite in
sid) kernel_from=sid ;;
trixie) kernel_from=trixie-backports ;;
*) die "unknown suite '$suite' (sid or trixie)" ;;
esac

t0=$(now)
debootstrap --variant=minbase "$suite" "$root" "$mirror" > "$out/debootstrap.log" 2>&1 ||
	die "debootstrap $suite failed: $(why "$out/debootstrap.log")"
echo "build-image: debootstrap --variant=minbase $suite: $(since "$t0") s"

t1=$(now)
cat > "$root/etc/apt/apt.conf.d/90odpx" <<EOF
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
EOF
# no docs (but rdma-core's test suite), man pages or translations in the image; no fsync per file (the tree is thrown away
# if the build fails, and the image is written in one go by mke2fs)
cat > "$root/etc/dpkg/dpkg.cfg.d/90odpx" <<EOF
force-unsafe-io
path-exclude /usr/share/doc/*
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-include /usr/share/doc/rdma-core
path-include /usr/share/doc/rdma-core/tests
path-include /usr/share/doc/rdma-core/tests/*
EOF
# The kernel's postinst would have dracut build an initrd (twice) that the guest never boots:
# divert dracut to a no-op before it is installed.
chroot "$root" dpkg-divert --quiet --local --rename --divert /usr/bin/dracut.odpx-disabled \
	--add /usr/bin/dracut
printf '#!/bin/sh\n# odpx test image: build-image.sh makes the initramfs\nexit 0\n' \
	> "$root/usr/bin/dracut"
chmod 0755 "$root/usr/bin/dracut"
if [ "$suite" = trixie ]; then
	echo "deb $mirror trixie-backports main" > "$root/etc/apt/sources.list.d/backports.list"
	kpkg=linux-image-amd64/trixie-backports
	pkgs=$(echo "$pkgs" | sed "s|linux-image-amd64|$kpkg|")
fi
# no service is started in the build root (openssh-server's postinst would try)
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --bind /dev "$root/dev"
rc=0
{
	[ "$suite" != trixie ] || chroot "$root" apt-get update -q
	# shellcheck disable=SC2086  # $pkgs is a word list
	chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $pkgs
} > "$out/apt.log" 2>&1 || rc=$?
chroot "$root" apt-get clean
unmount_all
[ $rc = 0 ] || die "apt-get install in the $suite root failed: $(why "$out/apt.log")"
rm -f "$root/usr/sbin/policy-rc.d"
# ssh between the two guests of `odpx-vm pair` (mpirun starts the remote rank over it): both
# boot this image, so one key made here, authorized for root, lets each log into the other.
# The guests live on a private network of the host only: no host-key checks.
mkdir -p -m 0700 "$root/root/.ssh"
chroot "$root" ssh-keygen -q -t ed25519 -N '' -C odpx-pair -f /root/.ssh/id_ed25519 ||
	die "ssh-keygen in the $suite root failed"
cp "$root/root/.ssh/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
cat > "$root/root/.ssh/config" <<EOF
Host *
	StrictHostKeyChecking no
	UserKnownHostsFile /dev/null
	LogLevel ERROR
	BatchMode yes
	ConnectTimeout 60
EOF
# the distribution's initrd (if any) is not used; the package lists are not needed
rm -rf "$root"/boot/initrd.img-* "$root"/var/lib/apt/lists/*
echo "build-image: packages (kernel from $kernel_from): $(since "$t1") s"

t2=$(now)
kver=$(ls "$root/lib/modules" | sort -V | tail -n1)
if [ -z "$kver" ] || [ ! -f "$root/boot/vmlinuz-$kver" ]; then
	die "no kernel in the $suite root"
fi
install -m 0755 "$here/guest-init" "$root/sbin/odpx-init"

# initramfs: static busybox, the modules needed to mount an ext4 root on virtio-blk (with their
# dependencies and soft dependencies, in load order, as the guest's own modprobe resolves them)
ird=$out/initramfs
mkdir -p "$ird/bin" "$ird/dev" "$ird/proc" "$ird/newroot" "$ird/lib"
cp "$root/usr/bin/busybox" "$ird/bin/busybox"
install -m 0755 "$here/initramfs-init" "$ird/init"
: > "$ird/modules"
chroot "$root" modprobe -a -S "$kver" --show-depends virtio_pci virtio_blk ext4 \
	> "$out/modules.txt" || die "modprobe --show-depends failed in the $suite root"
for ko in $(awk '$1 == "insmod" { print $2 }' "$out/modules.txt"); do
	name=$(basename "$ko"); name=${name%%.ko*}
	grep -qx "$name.ko" "$ird/modules" && continue
	case $ko in
	*.ko.xz) xz -dc "$root$ko" > "$ird/lib/$name.ko" ;;
	*.ko.zst)
		command -v zstd > /dev/null || die "$ko is zstd-compressed: install zstd on the host"
		zstd -qdc "$root$ko" > "$ird/lib/$name.ko" ;;
	*.ko.gz) gzip -dc "$root$ko" > "$ird/lib/$name.ko" ;;
	*.ko) cp "$root$ko" "$ird/lib/$name.ko" ;;
	*) die "unexpected module file $ko" ;;
	esac
	echo "$name.ko" >> "$ird/modules"
done
(cd "$ird" && find . | "$root/usr/bin/busybox" cpio -o -H newc 2>/dev/null) > "$out/initramfs.cpio"
rm -rf "$ird"
cp "$root/boot/vmlinuz-$kver" "$out/vmlinuz"

echo "$suite (kernel from $kernel_from)" > "$out/suite"
echo "$kver" > "$out/kernel"
chroot "$root" dpkg-query -W -f '${Package} ${Version}\n' > "$out/packages.txt"
mke2fs -q -F -t ext4 -L odpx-root -d "$root" "$out/rootfs.img" 2G > /dev/null ||
	die "mke2fs -d failed"
rm -rf --one-file-system "$root"
echo "build-image: initramfs and ext4 image: $(since "$t2") s (total $(since "$t0") s)"
