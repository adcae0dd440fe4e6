#!/usr/bin/env bash
# Builds the server image offline, with no Docker daemon and no base image
# to pull: the static binary is built here, a build context holding exactly
# what the image contains is staged, and deploy/container/Containerfile
# (FROM scratch) turns it into an image with buildah or podman.
#
#   deploy/container/build.sh IMAGE [VERSION]      (make image)
#
# Environment: GO (go), CA_BUNDLE (the host's CA certificates, which the
# image needs for a JWKS URL over HTTPS), CONTEXT_DIR (where to stage;
# default bin/image-context, replaced on every run).
set -euo pipefail
umask 022 # the image's files must be readable by its non-root user
cd "$(dirname "$0")/../.."

image=${1:?usage: deploy/container/build.sh IMAGE [VERSION]}
version=${2:-$(git describe --tags --always --dirty 2>/dev/null || echo 0.1.0-dev)}
go=${GO:-go}
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
ctx=${CONTEXT_DIR:-bin/image-context}

tool=$(command -v buildah || command -v podman || true)
if [ -z "$tool" ]; then
  echo "make image needs buildah or podman (apt-get install buildah); no Docker daemon is needed" >&2
  exit 1
fi
if [ ! -s "$ca" ]; then
  echo "no CA bundle at $ca (apt-get install ca-certificates, or set CA_BUNDLE)" >&2
  exit 1
fi

rm -rf "$ctx"
mkdir -p "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/tmp" "$ctx/rootfs/var/lib" "$ctx/data/concord"
# CGO_ENABLED=0: a static binary that runs on an image with no libc.
CGO_ENABLED=0 "$go" build -trimpath \
  -ldflags "-s -w -X github.com/concordmap/concord/node.Version=${version}" \
  -o "$ctx/concord" ./cmd/concord
cp deploy/container/rootfs/etc/passwd deploy/container/rootfs/etc/group "$ctx/rootfs/etc/"
cp "$ca" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
chmod 0644 "$ctx/rootfs/etc/passwd" "$ctx/rootfs/etc/group" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
chmod 1777 "$ctx/rootfs/tmp"
chmod 0750 "$ctx/data/concord"

# The image this tag named before, removed below once the tag moves, so
# rebuilds do not pile up untagged images.
old=$("$tool" images -q "$image" 2>/dev/null | head -n1 || true)

# docker format: the OCI image config has no HEALTHCHECK and would drop it.
case "$tool" in
  *buildah) "$tool" bud --format docker -f deploy/container/Containerfile \
              --label org.opencontainers.image.version="$version" -t "$image" "$ctx" ;;
  *)        "$tool" build --format docker -f deploy/container/Containerfile \
              --label org.opencontainers.image.version="$version" -t "$image" "$ctx" ;;
esac
new=$("$tool" images -q "$image" 2>/dev/null | head -n1 || true)
if [ -n "$old" ] && [ "$old" != "$new" ]; then
  "$tool" rmi "$old" >/dev/null 2>&1 || true # still used by a container: keep it
fi
