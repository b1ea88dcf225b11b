#!/usr/bin/env bash
# Makes docs/monitoring-console.png: `reckonctl local --prometheus` with three
# workers, and headless Chromium (Debian's `chromium`) on the console page
# Prometheus serves, about 75 s into the run. Usage: console_screenshot.sh [OUT.png]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/docs/monitoring-console.png}
port=19090
work=$(mktemp -d)
"$root/build/ctl/reckonctl" local --workers 3 --prometheus --prometheus-listen "127.0.0.1:$port" \
  --work-dir "$work" --layers 784,256,10 --epochs 400 --lr-schedule constant --eval-samples 2000 > "$work/local.out" 2>&1 &
pid=$!
sleep 75
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1250 \
  --virtual-time-budget=10000 --screenshot="$out" "http://127.0.0.1:$port/consoles/reckon.html"
kill -INT "$pid"
wait "$pid" || true
rm -rf "$work"
echo "wrote $out"
