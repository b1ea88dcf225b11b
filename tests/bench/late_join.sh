#!/bin/sh
# A `reckonctl local --worker-binary` wrapper for a late join: w0 starts
# alone (--bootstrap: it trains without waiting for its peers) and w1 starts
# LATE_S seconds later (default 20), so it joins from w0's snapshot
# (--join-by-replay=false: not from w0's log, which may be smaller). Other
# workers start at once. RECKON_WORKER: the reckon-worker to run (default:
# the one built in build/). docs/scaling.md "Striped snapshots" uses it.
worker=${RECKON_WORKER:-$(dirname "$0")/../../build/worker/reckon-worker}
for a in "$@"; do
  case "$a" in
    w0) exec "$worker" "$@" --bootstrap ;;
    w1) sleep "${LATE_S:-20}"; exec "$worker" "$@" --join-by-replay=false ;;
  esac
done
exec "$worker" "$@"
