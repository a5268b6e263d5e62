#!/bin/sh
# Regenerate the report screenshots of docs/images in scratch directories, rendered in
# headless Chromium (Debian's `chromium` package):
#   report-demo.png          the demo's run (`taskdaemon demo`, then `report`)
#   report-daemon-plan.png   a daemon plan of two specs (one and two phases), `report PLAN`
# Usage: scripts/report-screenshot.sh [TASKDAEMON_BIN]   (default: target/debug/taskdaemon)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/target/debug/taskdaemon}
[ -x "$bin" ] || { echo "no $bin: run \`cargo build -p taskdaemon\` first" >&2; exit 1; }
chromium=$(command -v chromium || command -v chromium-browser || true)
[ -n "$chromium" ] || { echo "chromium is not installed: apt-get install chromium" >&2; exit 1; }
scratch=$(mktemp -d)
trap '"$bin" -C "$scratch/plan" daemon stop >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT
mkdir -p "$scratch/home" "$root/docs/images"
printf '[user]\n\tname = you\n\temail = you@example.com\n[init]\n\tdefaultBranch = main\n' \
    >"$scratch/home/.gitconfig"
export HOME="$scratch/home" GIT_CONFIG_GLOBAL="$scratch/home/.gitconfig" \
    TASKDAEMON_NOW=2026-11-24T09:00:00Z

shot() { # shot HTML PNG HEIGHT
    "$chromium" --headless --no-sandbox --disable-gpu --disable-background-networking \
        --disable-component-update --disable-sync --no-first-run \
        --user-data-dir="$scratch/profile" --hide-scrollbars \
        --screenshot="$2" --window-size="1280,$3" "file://$1" 2>/dev/null
    echo "wrote $2 ($(wc -c <"$2") bytes)"
}

# The demo.
"$bin" demo --path "$scratch/demo" >/dev/null 2>&1
"$bin" -C "$scratch/demo" report -o "$scratch/demo.html" >/dev/null
shot "$scratch/demo.html" "$root/docs/images/report-demo.png" 1000

# A daemon plan: the plan loop's five review passes, the spec loop, three phases.
cat >"$scratch/agent.sh" <<'EOF'
#!/bin/sh
case "$TASKDAEMON_LOOP" in
plan)
  printf '# Widgets\n\n## Goals\nwidgets (review pass %s)\n\n## Approach\ntwo specs\n' \
    "$TASKDAEMON_REVIEW_PASS" >"$TASKDAEMON_PLAN_FILE"
  echo "Review pass $TASKDAEMON_REVIEW_PASS: the plan is written."
  ;;
spec)
  mkdir -p "$TASKDAEMON_SPECS_DIR"
  printf -- '---\ntitle: alpha\ndeps: []\nphases: ["Phase 1: schema"]\nvalidate: true\n---\nBuild alpha.\n' \
    >"$TASKDAEMON_SPECS_DIR/01-alpha.md"
  printf -- '---\ntitle: beta\ndeps: [alpha]\nphases: ["Phase 1: api", "Phase 2: ui"]\nvalidate: true\n---\nBuild beta.\n' \
    >"$TASKDAEMON_SPECS_DIR/02-beta.md"
  ;;
phase)
  spec=$(echo "$TASKDAEMON_SPEC_ID" | sed 's/^[0-9a-f]*-spec-//')
  echo "phase $TASKDAEMON_PHASE_NUMBER" >>"$spec.txt"
  git add -A && git commit -qm "$spec: phase $TASKDAEMON_PHASE_NUMBER"
  echo "<promise>COMPLETE</promise>"
  ;;
esac
EOF
chmod +x "$scratch/agent.sh"
mkdir "$scratch/plan"
git -C "$scratch/plan" init -q
echo "widgets" >"$scratch/plan/README.md"
git -C "$scratch/plan" add -A
git -C "$scratch/plan" commit -qm "initial"
export TASKDAEMON_AGENT="cmd:$scratch/agent.sh"
"$bin" -C "$scratch/plan" submit plan "build widgets" --target main >/dev/null
"$bin" -C "$scratch/plan" daemon start --max-loops 2 --tick 0.2 >/dev/null
tries=0
until "$bin" -C "$scratch/plan" list plans --status complete 2>/dev/null | grep -q "build widgets"; do
    tries=$((tries + 1))
    [ "$tries" -lt 600 ] || { echo "the plan did not complete within 2 minutes" >&2; exit 1; }
    sleep 0.2
done
"$bin" -C "$scratch/plan" daemon stop >/dev/null
plan=$("$bin" -C "$scratch/plan" list plans | awk '/build widgets/ { print $1; exit }')
"$bin" -C "$scratch/plan" report "$plan" -o "$scratch/plan.html" >/dev/null
shot "$scratch/plan.html" "$root/docs/images/report-daemon-plan.png" 2000
