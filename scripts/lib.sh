# shellcheck shell=bash
# What scripts/container_check.sh and scripts/compose_stack.sh share: logging and timing, installing missing
# Debian packages, the debootstrap base image that stands in for python:3.11-slim, and the CPython 3.11 wheelhouse
# served on 127.0.0.1 for the image builds. Sourced, never run; the caller sets `set -euo pipefail`, WORK (its
# scratch folder), CACHE_DIR and PY_VERSION, and runs from the repository root.

log() { printf '\n== %s\n' "$*"; }
die() {
    printf '\nFAIL: %s\n' "$*" >&2
    exit 1
}
now_us() { local t="${EPOCHREALTIME/./}"; printf '%s' "$t"; }
elapsed() { # start_us -> "12.3"
    local d=$(($(now_us) - $1))
    printf '%d.%d' $((d / 1000000)) $((d % 1000000 / 100000))
}

apt_install() { # packages... -> installs them (apt-get update once, only when the first try fails); log in $WORK/apt.log
    command -v apt-get >/dev/null || die "missing $* and no apt-get to install them"
    echo "installing: $*"
    export DEBIAN_FRONTEND=noninteractive
    if ! timeout 900 apt-get install -y -q "$@" >"$WORK/apt.log" 2>&1; then
        timeout 300 apt-get update -q >>"$WORK/apt.log" 2>&1 || true
        timeout 900 apt-get install -y -q "$@" >>"$WORK/apt.log" 2>&1 ||
            die "apt-get install $* failed, see $WORK/apt.log"
    fi
}

debian_mirror() { # the Debian mirror apt uses here, else deb.debian.org
    local m
    m="$(
        {
            grep -hsE '^[[:space:]]*URIs:' /etc/apt/sources.list.d/*.sources | awk '{ for (i = 2; i <= NF; i++) print $i }'
            grep -hsE '^[[:space:]]*deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
                sed -E 's/\[[^]]*\]//' | awk '{ print $2 }'
        } | grep -E '^https?://[^ ]*/debian/?$' | head -n 1 || true
    )"
    printf '%s' "${m:-http://deb.debian.org/debian}"
}

import_base_image() { # name engine... -> a minimal Debian bookworm with python3 and venv, imported as name
    local name="$1" mirror rootfs base_py
    shift
    mirror="${DEBIAN_MIRROR:-$(debian_mirror)}"
    rootfs="$WORK/rootfs"
    echo "debootstrap bookworm from $mirror (log: $WORK/debootstrap.log)"
    timeout 900 debootstrap --variant=minbase --include=ca-certificates,python3,python3-venv \
        bookworm "$rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 ||
        die "debootstrap failed, see $WORK/debootstrap.log"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    # As Debian's -slim images (under python:3.11-slim) do: no documentation, man pages or translations.
    rm -rf "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
    base_py="$(chroot "$rootfs" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    [[ "$base_py" == "$PY_VERSION" ]] || die "the base image has Python $base_py, not $PY_VERSION"
    timeout 600 tar -C "$rootfs" --numeric-owner -cf - . |
        timeout 600 "$@" import \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'ENV LANG=C.UTF-8' \
            --change 'CMD ["python3"]' \
            - "$name" >/dev/null
    rm -rf "$rootfs"
}

wheelhouse_path() { # -> the cache folder for this requirements.txt and PY_VERSION
    printf '%s' "$CACHE_DIR/wheelhouse-py$PY_VERSION-$(sha256sum requirements.txt | cut -c1-12)"
}
pip_target_args() { # -> sets PIP_TARGET: pip download's options for CPython PY_VERSION on Debian bookworm here
    local arch v
    arch="$(uname -m)"
    PIP_TARGET=(--only-binary=:all: --python-version "$PY_VERSION" --implementation cp --abi "cp${PY_VERSION/./}")
    for v in $(seq 36 -1 17); do PIP_TARGET+=(--platform "manylinux_2_${v}_${arch}"); done # bookworm: glibc 2.36
    PIP_TARGET+=(--platform "manylinux2014_${arch}" --platform "manylinux_2_12_${arch}" --platform "manylinux2010_${arch}"
        --platform "manylinux_2_5_${arch}" --platform "manylinux1_${arch}")
}
torch_requirement() { # -> requirements.txt's torch line (its comment dropped), or nothing
    sed -n -e 's/[[:space:]]*#.*$//' -e 's/^[[:space:]]*\(torch[[:space:]]*[=<>~!].*\)$/\1/p' requirements.txt | head -n 1
}
check_torch_wheels() { # folder -> dies unless it holds a CPU torch wheel and no other
    local torch_wheels
    torch_wheels="$(find "$1" -maxdepth 1 -name 'torch-*.whl' -printf '%f\n')"
    grep -q '+cpu-' <<<"$torch_wheels" || die "no CPU torch wheel in $1 (got: ${torch_wheels:-none})"
    if grep -qv '+cpu-' <<<"$torch_wheels"; then
        die "a non-CPU (CUDA) torch wheel is in $1; remove it: $torch_wheels"
    fi
}
serve_wheelhouse() { # folder port -> serves it on 127.0.0.1:port; sets WHEEL_SERVER_PID and WHEELHOUSE_URL
    setsid python3 -m http.server --bind 127.0.0.1 --directory "$1" "$2" >"$WORK/wheel-server.log" 2>&1 </dev/null &
    WHEEL_SERVER_PID=$!
    WHEELHOUSE_URL="http://127.0.0.1:$2/"
    for _ in $(seq 1 50); do
        curl -fsS -m 2 -o /dev/null "$WHEELHOUSE_URL" 2>/dev/null && break
        sleep 0.2
    done
    curl -fsS -m 5 -o /dev/null "$WHEELHOUSE_URL" || die "the wheel server on $WHEELHOUSE_URL did not come up"
}
