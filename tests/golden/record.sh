#!/bin/sh
# Re-record the golden recordings (root, after `./x build`), then bless the expected
# outputs: WASMTAP_BLESS=1 cargo test --release -p wasmtap-tests --test golden
set -eu
cd "$(dirname "$0")"
root=../..
w=$root/target/release/wasmtap
work=$root/target/workloads
mkdir -p "$work"
cc -O2 -g -fno-omit-frame-pointer -o "$work/gp" "$root/tests/workloads/getppid_paced.c"
cc -O2 -g -fno-omit-frame-pointer -o "$work/spin_func" "$root/tests/workloads/spin_func.c"
# 5 rounds of 200 getppid calls with 1 ms sleeps: syscalls for syscount and syslatency.
"$w" record -o syscalls.wtrec syscount syslatency -c "$work/gp 5 200 1"
# One second of a function spinning: stacks for profile.
"$w" record -o profile.wtrec profile -c "$work/spin_func 1000"
# Workloads that know what they did: opens, a process family, writes.
cc -O2 -g -o "$work/opener" "$root/tests/workloads/opener.c"
cc -O2 -g -o "$work/forker" "$root/tests/workloads/forker.c"
cc -O2 -g -o "$work/writer" "$root/tests/workloads/writer.c"
"$w" record -o files.wtrec opensnoop opentrace openaggr --param openaggr.interval=100ms -c "$work/opener 5 2 2 150"
"$w" record -o procs.wtrec exitsnoop proclife forktime -c "$work/forker 4 50"
"$w" record -o writes.wtrec wstat syscount --param syscount.errors=true --param syscount.latency=true \
    -c "$work/writer 20 100 3 0"
# 100 pipe round trips between two processes: run-queue waits (wakeups, switches) for runqlat.
cc -O2 -g -o "$work/pingpong" "$root/tests/workloads/pingpong.c"
"$w" record -o runqlat.wtrec runqlat -c "$work/pingpong 100"
# 100 rounds of 3 ms of CPU and a 2 ms sleep: on-CPU slices for cpudist.
cc -O2 -g -o "$work/slices" "$root/tests/workloads/slices.c"
# System-wide for a second: under -c a recording keeps only events whose current task is
# the command's, and a slice starts in the switch away from another task (docs/aggregations.md).
"$work/slices" 100 3 >/dev/null &
"$w" record -o cpudist.wtrec cpudist -d 1s
wait
# 20 direct 4 KiB writes, then 20 reads, of a loop device over a file in memory: block
# requests for biosnoop and biolatency (system-wide: requests complete in other tasks).
img=/dev/shm/wasmtap-golden-bio.img
truncate -s 16M "$img"
loopdev=$(losetup -f --show "$img")
"$w" record -o bio.wtrec biosnoop biolatency -d 2s &
sleep 1
dd if=/dev/zero of="$loopdev" bs=4096 count=20 oflag=direct 2>/dev/null
dd if="$loopdev" of=/dev/null bs=4096 count=20 iflag=direct 2>/dev/null
wait
losetup -d "$loopdev"
rm -f "$img"
