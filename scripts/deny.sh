#!/usr/bin/env bash
# Checks the dependency graph against deny.toml: licences (permissive only), bans
# (OpenSSL, a second crypto backend, new duplicate versions, wildcards) and sources
# (crates.io only). Installs cargo-deny from the registry when missing. Advisories need
# the RustSec database from GitHub: `scripts/deny.sh advisories` where it is reachable.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo-deny >/dev/null; then
  echo "installing cargo-deny"
  cargo install cargo-deny --version 0.20.2 --locked --quiet
fi
if [ "$#" -gt 0 ]; then
  cargo deny check "$@"
else
  cargo deny check licenses bans sources
fi
