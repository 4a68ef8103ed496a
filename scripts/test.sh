#!/usr/bin/env bash
# The project's test command (the README's second line): every Go test with
# the race detector.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -race -count=1 -timeout 20m ./...
