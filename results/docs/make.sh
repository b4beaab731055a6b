#!/usr/bin/env bash
# Screenshots of the documentation site (issue 39): the strictly built site served over http (the
# search needs it), each page in headless Chromium (Debian's: apt-get install chromium), 1280 x 1800.
#   bash results/docs/make.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir "$site" 2>&1 | tail -1
python -m http.server 8765 --bind 127.0.0.1 --directory "$site" > /dev/null 2>&1 &
server=$!
trap 'kill $server 2> /dev/null || true' EXIT
sleep 1
for page in quickstart api write-your-own configuration; do
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
      --disable-component-update --disable-sync --user-data-dir="$(mktemp -d)" --hide-scrollbars \
      --window-size=1280,1800 --virtual-time-budget=5000 \
      --screenshot="results/docs/$page.png" "http://127.0.0.1:8765/$page/" 2>&1 | grep -i "written" || exit 1
done
