#!/bin/sh
# Builds the static coord binary that the container image ships, with the one set of build
# flags both deploy/Dockerfile and the e2e tests use (so CI runs exactly what the image runs):
#
#   deploy/build-static.sh OUTPUT      e.g. deploy/build-static.sh bin/coord-static
#
# CGO is off (the SQLite driver is pure Go), so the result links nothing at run time and runs
# in an empty image. COORDKIT_VERSION, when set, is what `coord version` prints.
set -eu
out=${1:?usage: deploy/build-static.sh OUTPUT}
case $out in /*) ;; *) out=$(pwd)/$out ;; esac
cd "$(dirname "$0")/../cmd/coord"
CGO_ENABLED=0 GOWORK=off go build -trimpath -ldflags="-s -w -X main.version=${COORDKIT_VERSION:-}" -o "$out" .
