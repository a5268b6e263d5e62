#!/bin/sh
# Regenerate docs/images/report-demo.png: run the demo in a scratch directory, write its
# report, and render it in headless Chromium (Debian's `chromium` package).
# Usage: scripts/report-screenshot.sh [TASKDAEMON_BIN]   (default: target/debug/taskdaemon)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/target/debug/taskdaemon}
[ -x "$bin" ] || { echo "no $bin: run \`cargo build -p taskdaemon\` first" >&2; exit 1; }
chromium=$(command -v chromium || command -v chromium-browser || true)
[ -n "$chromium" ] || { echo "chromium is not installed: apt-get install chromium" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
HOME=$scratch/home GIT_CONFIG_GLOBAL=/dev/null TASKDAEMON_NOW=2026-11-24T09:00:00Z \
    "$bin" demo --path "$scratch/demo" >/dev/null 2>&1
TASKDAEMON_NOW=2026-11-24T09:00:00Z "$bin" -C "$scratch/demo" report -o "$scratch/report.html" >/dev/null
out=$root/docs/images/report-demo.png
mkdir -p "$(dirname "$out")"
"$chromium" --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run \
    --user-data-dir="$scratch/profile" --hide-scrollbars \
    --screenshot="$out" --window-size=1280,1200 "file://$scratch/report.html" 2>/dev/null
echo "wrote $out ($(wc -c <"$out") bytes)"
