#!/usr/bin/env bash
# build-gpu.sh builds the binaries scripts/gpu.sh runs on a GPU machine into
# .gpu/ (static, no cgo), stamped with the VCS revision, and prints the first
# 12 hex digits of each binary's SHA-256: `pagedkv info` and the bench JSON
# print the same digits for the binary that ran, so a result names its build.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu
CGO_ENABLED=0 go test -c -o .gpu/tests.test ./tests
CGO_ENABLED=0 go build -buildvcs=true -o .gpu/pagedkv ./cmd/pagedkv
sha256sum .gpu/pagedkv .gpu/tests.test | cut -c1-12,65-
