#!/usr/bin/env bash
# The long soak: players of every protocol join and leave at 50 per second while the
# publisher restarts every 3 minutes, for SECONDS (default 1800); then RSS, open
# descriptors, sessions and streams must be back at their baseline. The suite runs the
# same test for 60 s (crates/server/tests/e2e/soak.rs). Prints the figures it compared.
#
#   bash scripts/soak.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SLUICE_SOAK_SECS=${1:-1800} exec cargo test -q -p sluice-server --test e2e soak:: -- --nocapture
