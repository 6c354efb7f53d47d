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
