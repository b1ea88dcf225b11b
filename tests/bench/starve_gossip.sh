#!/bin/bash
# A loaded machine, made on purpose: runs `reckonctl local` with the given
# flags while every thread of every reckon-worker except its training thread
# (the main thread) and its compute pool ("reckon-cpu-N") is reniced to +10,
# again every 0.2 s so that threads started later are caught too. The gossip,
# gRPC and receive threads then get a small share of the cores and the peers'
# messages arrive late: what a machine whose other load takes those cores
# does to a free-running cluster (docs/benchmarks.md "Staleness when the
# gossip threads are starved").
#
# usage: tests/bench/starve_gossip.sh RECKONCTL [reckonctl local flags...]
# Prints local's own output (its status lines show each worker's max lag).
set -u
reckonctl=$1
shift
starve() {
  while :; do
    for pid in $(pgrep -x reckon-worker); do
      for task in /proc/"$pid"/task/*; do
        tid=${task##*/}
        [ "$tid" = "$pid" ] && continue
        case "$(cat "$task/comm" 2>/dev/null)" in reckon-cpu*) continue ;; esac
        renice -n 10 -p "$tid" >/dev/null 2>&1
      done
    done
    sleep 0.2
  done
}
starve &
starver=$!
trap 'kill $starver 2>/dev/null' EXIT
"$reckonctl" local "$@"
