# shellcheck shell=bash
# The container engine for `make images`, `make run-containers` and `make container-test` (sourced, not run).
#
#   engine_select            prints docker or podman (installing and configuring podman where it must)
#   podman_setup             containers.conf drop-in that lets podman run on this machine kind
#   podman_base_for BASE K   prints the image to build image K from: BASE if present or pullable, else the
#                            offline base (made once)
#   host_pip_mounts          prints the `-v` options that give a build the host's pip configuration
#
# Settings: RECPIPE_ENGINE=docker|podman (skip the detection), RECPIPE_OFFLINE_BASE=1 (do not try to pull),
# RECPIPE_DEBIAN_MIRROR (default http://deb.debian.org/debian).

OFFLINE_BASE=localhost/recpipe-offline-base:python3.11-bookworm
PODMAN_CONF=/etc/containers/containers.conf.d/recpipe.conf
PODMAN_PACKAGES=(podman buildah runc debootstrap uidmap slirp4netns fuse-overlayfs)

docker_usable() {
  command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 && docker buildx version >/dev/null 2>&1
}

engine_select() {
  case ${RECPIPE_ENGINE:-} in
    docker) docker_usable || { echo "container engine: RECPIPE_ENGINE=docker, but docker with a reachable daemon and BuildKit (buildx) is not here" >&2; return 1; }; echo docker; return ;;
    podman) podman_ready || return 1; echo podman; return ;;
    "") ;;
    *) echo "container engine: RECPIPE_ENGINE must be docker or podman, got '$RECPIPE_ENGINE'" >&2; return 1 ;;
  esac
  if docker_usable; then
    echo docker
  elif podman_ready; then
    echo podman
  else
    return 1
  fi
}

podman_ready() { # podman installed (by apt-get when missing and possible) and configured
  if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
      echo "container engine: none usable. docker: $(command -v docker >/dev/null 2>&1 && echo 'no reachable daemon with BuildKit (buildx)' || echo 'not found');" \
        "podman: not found, and it can be installed here only as root with apt-get." \
        "Install podman, buildah, runc and debootstrap (apt-get install -y ${PODMAN_PACKAGES[*]}), or start Docker, and retry." >&2
      return 1
    fi
    echo "==> installing ${PODMAN_PACKAGES[*]} (apt-get)" >&2
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${PODMAN_PACKAGES[@]}"; } >&2 || {
      echo "container engine: apt-get install ${PODMAN_PACKAGES[*]} failed (see above)" >&2
      return 1
    }
  fi
  podman_setup
}

podman_setup() {
  # crun cannot raise RLIMIT_NOFILE in this machine's sandbox and does not support its hybrid cgroups; runc
  # with these limits runs and builds.
  [[ $(id -u) -eq 0 ]] || return 0
  [[ -f $PODMAN_CONF ]] && return 0
  mkdir -p "$(dirname "$PODMAN_CONF")"
  cat >"$PODMAN_CONF" <<'EOF'
# Written by recpipe's scripts/container_engine.sh: podman on a machine whose sandbox refuses setrlimit and
# has hybrid cgroups (crun fails on both). Remove this file to go back to podman's defaults.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
EOF
  echo "==> wrote $PODMAN_CONF (runtime runc, default ulimits)" >&2
}

podman_base_for() {
  local base=$1 kind=$2
  if podman image exists "$base"; then
    echo "$base"
    return
  fi
  if [[ -z ${RECPIPE_OFFLINE_BASE:-} ]] && timeout 120 podman pull -q "$base" >/dev/null 2>&1; then
    echo "$base"
    return
  fi
  if [[ $base != python:3.11* ]]; then
    echo "make images: the base image $base of the $kind image cannot be pulled (no registry reachable?), and" \
      "only python:3.11 bases can be made offline (Debian bookworm's Python 3.11). The CUDA image needs" \
      "nvidia/cuda and the PyTorch CUDA wheel index: build it where a registry is reachable." >&2
    return 1
  fi
  echo "==> $base cannot be pulled: building from $OFFLINE_BASE instead" >&2
  podman image exists "$OFFLINE_BASE" || make_offline_base >&2
  echo "$OFFLINE_BASE"
}

make_offline_base() {
  # python:3.11-slim-bookworm's layout where it matters to the Dockerfiles: Debian bookworm, `python` and
  # `pip` of Python 3.11 on PATH and writable by the build, ca-certificates, C.UTF-8. The interpreter is
  # Debian's 3.11 (a venv in /usr/local/python, so pip installs never touch Debian's own packages).
  command -v debootstrap >/dev/null || { echo "make images: debootstrap not found (apt-get install -y debootstrap)" >&2; return 1; }
  local rootfs mirror=${RECPIPE_DEBIAN_MIRROR:-http://deb.debian.org/debian} start=$SECONDS
  rootfs=$(mktemp -d /var/tmp/recpipe-offline-base.XXXXXX)
  echo "==> debootstrap bookworm (minbase, python3) into $rootfs"
  debootstrap --variant=minbase --include=ca-certificates,python3,python3-venv bookworm "$rootfs" "$mirror" >/dev/null
  cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  # debian:bookworm-slim's image settings (debuerreotype): apt keeps no package archives or caches, dpkg
  # installs no docs, man pages or translations, so that a Dockerfile's apt-get leaves no cache behind.
  cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/docker-no-languages"
  echo 'Acquire::GzipIndexes "true";' >"$rootfs/etc/apt/apt.conf.d/docker-gzip-indexes"
  echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$rootfs/etc/apt/apt.conf.d/docker-autoremove-suggests"
  mkdir -p "$rootfs/etc/dpkg/dpkg.cfg.d"
  printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
    'path-exclude /usr/share/info/*' 'path-exclude /usr/share/locale/*' 'path-exclude /usr/share/man/*' \
    'path-exclude /usr/share/groff/*' 'path-exclude /usr/share/lintian/*' >"$rootfs/etc/dpkg/dpkg.cfg.d/docker"
  chroot "$rootfs" python3 -m venv /usr/local/python
  chroot "$rootfs" /usr/local/python/bin/python -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version'
  find "$rootfs/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/{info,locale,man,groff,lintian}/* "$rootfs"/tmp/*
  tar -C "$rootfs" -c . | podman import \
    --change 'ENV PATH=/usr/local/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python"]' - "$OFFLINE_BASE" >/dev/null
  rm -rf "$rootfs"
  echo "==> $OFFLINE_BASE made in $((SECONDS - start)) s"
}

host_pip_mounts() {
  # The host's pip settings, merged into one pip.conf written to $1 and mounted at /etc/pip.conf; every local
  # path they name (the CA bundle, constraints, find-links folders, file:// indexes with the files they link
  # to) mounted read-only under /tmp/recpipe-build, and the settings pointed there. Nothing is mounted over
  # a file the build may write (apt's ca-certificates rewrites /etc/ssl/certs/ca-certificates.crt); the only
  # traces in the image are an empty /etc/pip.conf and empty folders in /tmp (a tmpfs when steps run).
  "${PY:-.venv/bin/python}" - "$1" <<'EOF'
import re
import subprocess
import sys
from pathlib import Path

out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True)
settings: dict[tuple[str, str], str] = {}
for line in out.stdout.splitlines():
    m = re.fullmatch(r"([^.]*)\.([\w-]+)='?(.*?)'?", line.strip())
    if m:
        section = "global" if m.group(1) == ":env:" else m.group(1)
        settings.setdefault((section, m.group(2)), m.group(3))
mounts: dict[Path, str] = {}


def inside(item: str) -> str:
    scheme = "file://" if item.startswith("file://") else ""
    path = Path(item.removeprefix("file://"))
    if not path.is_absolute() or not path.exists():
        return item
    # A simple index links to ../../files: mount the folder that holds the index.
    root = path.parent if path.name == "simple" else path
    target = mounts.setdefault(root, f"/tmp/recpipe-build/{len(mounts)}-{root.name}")
    return scheme + target + ("/simple" if root != path else "")


lines: dict[str, list[str]] = {}
for (section, key), value in sorted(settings.items()):
    lines.setdefault(section, []).append(f"{key} = {' '.join(inside(v) for v in value.split())}")
conf = Path(sys.argv[1])
conf.write_text("".join(f"[{s}]\n" + "\n".join(kv) + "\n" for s, kv in lines.items()))
print(f"--volume={conf}:/etc/pip.conf:ro")
for host, target in mounts.items():
    print(f"--volume={host}:{target}:ro")
EOF
}
