#!/usr/bin/env bash
# Builds the neptune container image from the static binary:
#   deploy/build-image.sh [tag]        (default neptune:latest; or $NEPTUNE_IMAGE)
# No base image is pulled (the Dockerfile is FROM scratch), so this works
# where no registry is reachable.
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:-${NEPTUNE_IMAGE:-neptune:latest}}"
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT

commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
CGO_ENABLED=0 go build -trimpath \
  -ldflags "-X github.com/neptune-cluster/neptune/internal/version.Commit=${commit}" \
  -o "$ctx/neptune" ./cmd/neptune
: > "$ctx/keep"
cp deploy/Dockerfile "$ctx/Dockerfile"
# Plain `docker build`: the legacy builder and BuildKit both do.
docker build -q -t "$tag" "$ctx" >/dev/null
echo "built $tag ($(docker run --rm --entrypoint /neptune "$tag" version | tr '\n' ' '))"
