#!/usr/bin/env bash
# Builds the pinned Nomad and Consul binaries into .tools/bin from the Go
# module proxy. Each build is cached by the hash of its tools module, outside
# the checkout, so a second run (or a fresh clone on the same machine) costs
# nothing.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${CARAVAN_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/caravan-tools}
out="$root/.tools/bin"
mkdir -p "$out" "$cache"

export GOFLAGS=-buildvcs=false
export GONOSUMDB=github.com/hashicorp/nomad,github.com/hashicorp/consul
export CGO_ENABLED=1

build() {
  local name=$1 pkg=$2
  local mod="$root/e2e/tools/$name"
  local key
  key=$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)
  local cached="$cache/$name-$key"
  if [ ! -x "$cached" ]; then
    echo "==> building $name from $pkg (takes several minutes the first time)"
    local start=$SECONDS
    (cd "$mod" && go build -o "$cached.tmp" "$pkg")
    mv "$cached.tmp" "$cached"
    echo "==> built $name in $((SECONDS - start))s"
  fi
  if ! cmp -s "$cached" "$out/$name"; then
    cp "$cached" "$out/$name.tmp" && mv "$out/$name.tmp" "$out/$name"
  fi
  # sed reads to the end: with head, a binary still printing when head
  # exits dies of SIGPIPE, which pipefail turns into a failed build.
  "$out/$name" version | sed -n 1p
}

want=${1:-all}
case "$want" in
  nomad) build nomad github.com/hashicorp/nomad ;;
  consul) build consul github.com/hashicorp/consul ;;
  all)
    build nomad github.com/hashicorp/nomad
    build consul github.com/hashicorp/consul
    ;;
  *) echo "usage: $0 [nomad|consul|all]" >&2; exit 2 ;;
esac
