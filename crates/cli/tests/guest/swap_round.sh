#!/bin/bash
# One round of swap onto `zmem serve --swap` inside the guest it is swap
# for, with the guest's sysctls as the kernel set them: run by
# crates/cli/tests/vm_swap.rs and scripts/vm-swap-rounds as
#
#   bash swap_round.sh ZMEM FRONT BURST_MIB PROG MIB DEADLINE WATCHDOG
#
# FRONT is nbd (nbd.ko through nbd-client over a Unix socket) or ublk
# (/dev/ublkb0). zmem serves a 2G export with a 128M mem_limit, as a user
# would start it. BURST_MIB MiB of random (incompressible) data go through
# the device and are read back first (O_DIRECT), then mkswap and
# `swapon --discard=pages` (as docs/serve.md starts it: the store hears of
# the slots the kernel frees), then PROG (swap_pages) touches MIB MiB with
# a checksum per page. The
# whole round runs under WATCHDOG (watchdog.c): past DEADLINE seconds the
# guest prints its task dump and powers off.
#
# Prints the server's ready line and swap_mode, then one line
#   ROUND FRONT BURST outcome=ok|oom|WRONG|FAILED zmem=up|DEAD secs=S pswpout=N failed_writes=N
# and exits 0 when the program finished with every page right or was
# OOM-killed and zmem stayed up; 1 otherwise.
set -uo pipefail
zmem=$1 front=$2 burst=$3 prog=$4 mib=$5 deadline=$6 watchdog=$7
"$watchdog" "$deadline" &
wd=$!
ip link set lo up
echo "sysctl vm.min_free_kbytes=$(cat /proc/sys/vm/min_free_kbytes) vm.watermark_scale_factor=$(cat /proc/sys/vm/watermark_scale_factor) cpus=$(nproc) kernel=$(uname -r)"
ctl() { "$zmem" ctl --socket /run/zmem/nbd.sock.ctl "$@"; }
mkdir -p /run/zmem
if [ "$front" = nbd ]; then
    modprobe nbd
    "$zmem" serve --socket /run/zmem/nbd.sock --size 2G --mem-limit 128M --swap \
        --pid-file /run/zmem.pid 2>/run/serve.log &
else
    modprobe ublk_drv
    "$zmem" serve --ublk --ctl-socket /run/zmem/nbd.sock.ctl --size 2G --mem-limit 128M \
        --swap --pid-file /run/zmem.pid 2>/run/serve.log &
fi
zp=$!
for _ in $(seq 300); do [ -s /run/zmem.pid ] && break; kill -0 $zp 2>/dev/null || break; sleep 0.1; done
if [ ! -s /run/zmem.pid ]; then
    cat /run/serve.log
    echo "ROUND $front $burst outcome=FAILED zmem=DEAD secs=0 (did not start)"
    exit 1
fi
grep -E "swap mode|ready" /run/serve.log | sed 's/^[^ ]* //'
echo "swap_mode ready: $(ctl swap_mode)"
if [ "$front" = nbd ]; then
    nbd-client -N zram0 -u /run/zmem/nbd.sock /dev/nbd0 -b 4096 -swap >/dev/null
    dev=/dev/nbd0
else
    dev=/dev/ublkb0
fi
head -c $((burst << 20)) /dev/urandom >/tmp/burst
dd if=/tmp/burst of=$dev bs=1M oflag=direct status=none || echo "burst: write failed"
dd if=$dev of=/tmp/back bs=1M count="$burst" iflag=direct status=none || echo "burst: read failed"
cmp -s /tmp/burst /tmp/back && echo "burst: $burst MiB of random data read back right" \
    || echo "burst: $burst MiB read back WRONG"
rm -f /tmp/burst /tmp/back
echo "swap_mode after the burst: $(ctl swap_mode)"
mkswap $dev >/dev/null
swapon --discard=pages $dev
before=$(awk '/^pswpout /{print $2}' /proc/vmstat)
kills=$(awk '/^oom_kill /{print $2}' /proc/vmstat)
dmesg -c >/dev/null
start=$(cut -d' ' -f1 /proc/uptime)
"$prog" "$mib" 1 >/tmp/prog.out 2>&1
code=$?
end=$(cut -d' ' -f1 /proc/uptime)
cat /tmp/prog.out
if [ $code = 0 ] && grep -q ' 0 wrong' /tmp/prog.out; then outcome=ok
elif [ $code = 137 ] && [ "$(awk '/^oom_kill /{print $2}' /proc/vmstat)" -gt "$kills" ]; then outcome=oom
else outcome=WRONG; fi
dmesg | grep -E 'Killed process|Manual OOM|error \(|I/O error|Write-error|Read-error' \
    | sed 's/^\[[ 0-9.]*\] //; s/([0-9:]*)$//' | sort | uniq -c | sort -rn | head -8
if kill -0 $zp 2>/dev/null; then up=up; else up=DEAD; fi
after=$(awk '/^pswpout /{print $2}' /proc/vmstat)
failed=$(ctl io_stat 2>/dev/null | awk '{print $2}')
echo "swap_mode after: $(ctl swap_mode 2>&1)"
echo "mm_stat after: $(ctl mm_stat 2>&1)"
sleep 3
ctl compact 1 >/dev/null 2>&1
echo "mm_stat compacted: $(ctl mm_stat 2>&1)"
echo "swap_mode compacted: $(ctl swap_mode 2>&1)"
ctl status 2>&1 | tail -1
grep -E '^(VmRSS|VmHWM|VmLck)' /proc/$zp/status 2>/dev/null | tr -s ' \n' ' '; echo
for t in /proc/$zp/task/*; do
    [ "$(cat $t/comm 2>/dev/null)" = reserve ] || continue
    awk -v hz="$(getconf CLK_TCK)" '{printf "reserve thread cpu %.1f s\n", ($14 + $15) / hz}' $t/stat
done
echo "ROUND $front $burst outcome=$outcome zmem=$up secs=$(awk -v s="$start" -v e="$end" 'BEGIN{printf "%.1f", e - s}') pswpout=$((after - before)) failed_writes=${failed:-?}"
swapoff $dev 2>/dev/null || true
[ "$front" = nbd ] && nbd-client -d $dev >/dev/null 2>&1
kill -TERM $zp 2>/dev/null; wait $zp
echo "zmem exit $?, vm.min_free_kbytes now $(cat /proc/sys/vm/min_free_kbytes)"
kill $wd 2>/dev/null
[ $up = up ] && { [ $outcome = ok ] || [ $outcome = oom ]; }
