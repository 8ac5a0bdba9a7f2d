#!/bin/bash
# `zmem serve --ublk` inside a guest whose kernel has ublk_drv: the exports
# as /dev/ublkbN through their whole life. Run by crates/cli/tests/
# vm_ublk.rs as `bash serve_ublk.sh ZMEM DATA`; prints a line per check and
# "serve_ublk: PASS" last; any failure exits non-zero at once (set -e).
set -euo pipefail
zmem=$1
data=$2
ctl_sock=/run/zmem-ublk.ctl
pid_file=/run/zmem-ublk.pid
log=/run/zmem-ublk.log
ctl() { "$zmem" ctl --socket "$ctl_sock" "$@"; }
fail() { echo "FAIL: $*"; cat "$log" 2>/dev/null || true; exit 1; }
# Waits up to 30 s for a condition (a shell command) to hold.
wait_for() {
    for _ in $(seq 300); do
        if eval "$1"; then return 0; fi
        sleep 0.1
    done
    fail "waited 30 s for: $1"
}
start() {
    rm -f "$pid_file"
    "$zmem" serve --ublk --ctl-socket "$ctl_sock" --pid-file "$pid_file" \
        --comp lz4 --ublk-queues 2 --queue-depth 32 "$@" >>"$log" 2>&1 &
    server=$!
    wait_for "[ -s $pid_file ] || ! kill -0 $server 2>/dev/null"
    [ -s "$pid_file" ] || fail "zmem serve --ublk did not start"
}
# orig_data_size of an export.
orig() { ctl --export "$1" mm_stat | awk '{print $1}'; }

modprobe ublk_drv
ls /dev/ublkb* /dev/ublkc* 2>/dev/null && fail "ublk devices exist before the server"

start --export a:64M --export ro:16M:ro --export spare:0
ctl exports
[ "$(ctl exports | awk -F'\t' '$1 == "a" {print $4}')" = /dev/ublkb0 ] || fail "a is not /dev/ublkb0"
[ "$(ctl exports | awk -F'\t' '$1 == "ro" {print $4}')" = /dev/ublkb1 ] || fail "ro is not /dev/ublkb1"
[ "$(ctl exports | awk -F'\t' '$1 == "spare" {print NF}')" = 3 ] || fail "spare has a device"
[ "$(blockdev --getsize64 /dev/ublkb0)" = $((64 << 20)) ] || fail "size of /dev/ublkb0"
[ "$(blockdev --getss /dev/ublkb0)" = 4096 ] || fail "logical block of /dev/ublkb0"
echo "exports: a /dev/ublkb0 64 MiB, ro /dev/ublkb1, spare none"

# Real data (the zmem binary's first 24 MiB, then 8 MiB of zeros) through
# the page cache and with O_DIRECT; the store holds it compressed.
head -c $((24 << 20)) "$data" >/tmp/in
head -c $((8 << 20)) /dev/zero >>/tmp/in
dd if=/tmp/in of=/dev/ublkb0 bs=1M oflag=direct status=none
dd if=/dev/ublkb0 of=/tmp/out bs=1M count=32 iflag=direct status=none
cmp /tmp/in /tmp/out || fail "O_DIRECT read back differs"
echo 3 >/proc/sys/vm/drop_caches
head -c $((32 << 20)) /dev/ublkb0 >/tmp/out
cmp /tmp/in /tmp/out || fail "buffered read back differs"
mm=$(ctl --export a mm_stat)
echo "a mm_stat after 32 MiB: $mm"
set -- $mm
[ "$1" -gt $((20 << 20)) ] && [ "$2" -lt "$1" ] || fail "mm_stat does not hold the data compressed"
[ "$6" -ge 2048 ] || fail "the 8 MiB of zeros are not same-filled pages"

# Discard and write-zeroes free pages, as zram's do.
blkdiscard -o $((16 << 20)) -l $((8 << 20)) /dev/ublkb0
after=$(orig a)
[ "$after" -le $(($1 - (8 << 20))) ] || fail "discard freed nothing ($1 -> $after)"
blkdiscard -z -o 0 -l $((8 << 20)) /dev/ublkb0
head -c $((8 << 20)) /dev/zero >/tmp/zeros
dd if=/dev/ublkb0 of=/tmp/out bs=1M count=8 iflag=direct status=none
cmp /tmp/zeros /tmp/out || fail "zeroed range does not read as zeros"
[ "$(orig a)" -le $((after - (8 << 20))) ] || fail "write-zeroes freed nothing"
echo "discard and write-zeroes free pages: orig_data_size $1 -> $(orig a)"

# I/O past the end is refused by the block layer; the device stays up.
if dd if=/dev/zero of=/dev/ublkb0 bs=4k seek=$((16384)) count=1 oflag=direct status=none 2>/tmp/err; then
    fail "a write past the end succeeded"
fi
echo "past the end: $(head -1 /tmp/err)"

# The read-only export is a read-only block device.
[ "$(blockdev --getro /dev/ublkb1)" = 1 ] || fail "/dev/ublkb1 is not read-only"
if dd if=/dev/zero of=/dev/ublkb1 bs=4k count=1 oflag=direct status=none 2>/dev/null; then
    fail "a write to the read-only device succeeded"
fi
echo "read-only: a write fails"

# A filesystem on it: reset and hot_remove refuse while it is mounted.
mkfs.ext4 -q -F /dev/ublkb0
mkdir -p /mnt/a
mount -o discard /dev/ublkb0 /mnt/a
cp /tmp/in /mnt/a/file
sync
ctl status
ctl status --raw --noheadings --output NAME,MOUNTPOINT | grep -qx "a /mnt/a" \
    || fail "status does not show where a is mounted"
if ctl --export a reset 2>/tmp/err; then fail "reset of a mounted device succeeded"; fi
grep -q "in use" /tmp/err || fail "reset's refusal: $(cat /tmp/err)"
echo "reset while mounted: $(cat /tmp/err)"
if ctl hot_remove a 2>/tmp/err; then fail "hot_remove of a mounted device succeeded"; fi
umount /mnt/a
ctl --export a reset
wait_for "[ ! -e /dev/ublkb0 ]"
echo "reset after umount: /dev/ublkb0 gone"
ctl --export a disksize 32M
wait_for "[ -b /dev/ublkb0 ]"
[ "$(blockdev --getsize64 /dev/ublkb0)" = $((32 << 20)) ] || fail "a's new size"
[ "$(orig a)" = 0 ] || fail "a's new store is not empty"
ctl --export spare disksize 8M
dev=$(ctl exports | awk -F'\t' '$1 == "spare" {print $4}')
[ -b "$dev" ] || fail "spare got no device"
ctl hot_add c 8M
c=$(ctl exports | awk -F'\t' '$1 == "c" {print $4}')
[ -b "$c" ] || fail "hot_add c 8M made no device"
ctl hot_remove c
wait_for "[ ! -e $c ]"
echo "disksize, hot_add and hot_remove: devices $dev and $c came, $c went"

# Past mem_limit a write fails with an I/O error the writer sees; the
# server and the pages stored before stay.
ctl hot_add small
ctl --export small mem_limit 4M
ctl --export small disksize 64M
sdev=$(ctl exports | awk -F'\t' '$1 == "small" {print $4}')
head -c $((1 << 20)) "$data" >/tmp/first
dd if=/tmp/first of="$sdev" bs=1M oflag=direct status=none
if dd if=/dev/urandom of="$sdev" bs=1M seek=1 count=16 oflag=direct status=none 2>/tmp/err; then
    fail "16 MiB of random data fit a 4M mem_limit"
fi
kill -0 "$server" || fail "the server died at mem_limit"
dd if="$sdev" of=/tmp/out bs=1M count=1 iflag=direct status=none
cmp /tmp/first /tmp/out || fail "the pages stored before mem_limit changed"
set -- $(ctl --export small mm_stat)
[ "$3" -le $((4 << 20)) ] || fail "mem_used_total $3 is past the 4M mem_limit"
echo "mem_limit: $(head -1 /tmp/err); earlier pages intact, mem_used_total $3"
ctl hot_remove small

# SIGTERM removes every device; the server exits 0.
kill -TERM "$server"
wait "$server" || fail "zmem serve exited $? on SIGTERM"
ls /dev/ublkb* /dev/ublkc* 2>/dev/null && fail "devices left after SIGTERM"
echo "SIGTERM: exit 0, no /dev/ublkb* or /dev/ublkc* left"

# SIGKILL mid-write: the writer sees I/O errors, the kernel removes the
# block device; the next server deletes what is left.
start --export k:64M
dd if=/dev/urandom of=/dev/ublkb0 bs=64k count=100000 oflag=direct status=none 2>/tmp/dderr &
writer=$!
sleep 1
kill -KILL "$server"
wait "$server" || true
if wait "$writer"; then fail "the writer did not see the server die"; fi
echo "writer after SIGKILL: $(head -1 /tmp/dderr)"
wait_for "[ ! -e /dev/ublkb0 ]"
[ -e /dev/ublkc0 ] || fail "expected /dev/ublkc0 to be left after SIGKILL"
echo "SIGKILL: /dev/ublkb0 gone, /dev/ublkc0 left"
start --export k2:8M
grep -q "removed /dev/ublkc0, left by a server that is gone" "$log" || fail "the stale device was not removed"
ls /dev/ublkc*
kill -TERM "$server"
wait "$server"
ls /dev/ublkb* /dev/ublkc* 2>/dev/null && fail "devices left after the second SIGTERM"
echo "next start removed the device a killed server left"

# Swap mode: the reserve's first pieces and the heap's free top are locked
# before the server is ready; data goes through the device from the
# reserve; the heap's top is kept at 1 MiB or more as the store grows.
start --swap --size 64M --mem-limit 32M
field() { printf '%s\n' "$mode" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
mode=$(ctl swap_mode)
echo "swap_mode when ready: $mode"
[ "$(field locked)" -ge $((4 << 20)) ] || fail "fewer than 4 pieces locked"
[ "$(field heap_top)" -ge $((1 << 20)) ] || fail "the heap's free top is under 1 MiB"
[ "$(awk '/^VmLck:/{print $2}' /proc/$server/status)" -gt 4096 ] || fail "VmLck under 4 MiB"
head -c $((16 << 20)) "$data" >/tmp/sin
dd if=/tmp/sin of=/dev/ublkb0 bs=1M oflag=direct status=none
dd if=/dev/ublkb0 of=/tmp/sout bs=1M count=16 iflag=direct status=none
cmp /tmp/sin /tmp/sout || fail "swap mode: read back differs"
sleep 1
mode=$(ctl swap_mode)
echo "swap_mode after 16 MiB: $mode"
[ "$(field taken)" -ge $((4 << 20)) ] || fail "the store took under 4 MiB of the reserve"
[ "$(field heap_top)" -ge $((1 << 20)) ] || fail "the heap's free top fell under 1 MiB"
kill -TERM "$server"
wait "$server" || fail "zmem serve --swap exited $? on SIGTERM"
ls /dev/ublkb* /dev/ublkc* 2>/dev/null && fail "devices left after SIGTERM in swap mode"
echo "swap mode: 16 MiB through /dev/ublkb0 from the locked reserve, heap kept ahead"
echo "serve_ublk: PASS"
