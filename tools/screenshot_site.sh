#!/usr/bin/env bash
# Screenshots of a batchrun site (report --format html) in headless Chromium, for a person to look at.
#
#   tools/screenshot_site.sh [SITE_DIR] [OUT_DIR]
#
# Without SITE_DIR it runs `batchrun demo` in a temporary folder and uses its results/site/.
# Writes OUT_DIR (default /tmp/batchrun-screenshots) with the index, the first route's page and the
# first task page at 1280x800 (desktop) and 390x844 (a phone), and tall captures (-full).
# Needs Debian's chromium (apt-get install chromium); run from the repository root.
set -euo pipefail
site="${1:-}"
out="${2:-/tmp/batchrun-screenshots}"
chromium="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$chromium" ]; then
  echo "chromium not found: apt-get install -y chromium" >&2
  exit 1
fi
batchrun="${BATCHRUN:-$(dirname "$0")/../.venv/bin/batchrun}"
if [ -z "$site" ]; then
  demo="$(mktemp -d /tmp/batchrun-demo-XXXXXX)"
  "$batchrun" -q demo --dir "$demo" > /dev/null
  site="$demo/results/site"
fi
mkdir -p "$out"
task="$(ls "$site"/tasks/*.html | head -n 1)"
route="$(ls "$site"/routes/*.html | head -n 1)"
shoot() {  # name url width height
  profile="$(mktemp -d /tmp/batchrun-chromium-XXXXXX)"
  "$chromium" --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
    --no-first-run --disable-sync --hide-scrollbars --user-data-dir="$profile" \
    --screenshot="$out/$1.png" --window-size="$3,$4" "$2" > /dev/null 2>&1
  rm -rf "$profile"
  echo "$out/$1.png"
}
shoot index-1280x800 "file://$site/index.html" 1280 800
shoot index-390x844 "file://$site/index.html" 390 844
shoot route-1280x800 "file://$route" 1280 800
shoot route-390x844 "file://$route" 390 844
shoot task-1280x800 "file://$task" 1280 800
shoot task-390x844 "file://$task" 390 844
shoot index-1280-full "file://$site/index.html" 1280 5200
shoot index-390-full "file://$site/index.html" 390 9000
shoot task-390-full "file://$task" 390 4000
