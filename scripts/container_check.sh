#!/usr/bin/env bash
# Prove that the Dockerfile builds and that the image serves the app, on a machine with no Docker engine and
# no access to container registries (only a Debian mirror and a Python package index, or this machine's own
# pip sources).
#
#   sudo scripts/container_check.sh        # from anywhere in the repo; ~7.5 min cold, ~25 s warm (both images)
#
# What it does, each phase under a timeout:
#   1. tools      installs podman, buildah, debootstrap and curl with apt-get when any is missing
#   2. base       builds a Debian bookworm image (python3 3.11 + venv) with debootstrap and imports it with
#                 podman, standing in for python:3.11-slim; kept between runs (BASE_REBUILD=1 makes it anew)
#   3. wheelhouse pip downloads requirements.txt (CPU torch) for CPython 3.11 on this machine, cached
#                 per requirements.txt between runs, and serves it on 127.0.0.1 for the build (WHEELHOUSE_URL)
#   4. build      podman build --isolation=chroot --format docker of the real Dockerfile with that base, twice:
#                 the image with the lab (torch) and the lesson-only image (--build-arg WITH_TORCH=0), whose
#                 size must stay within LESSON_MAX_MB and which must hold no torch
#   5. serve      for each image: starts its own CMD with buildah run on a free port (host network), polls
#                 /_stcore/health until it says "ok", fetches / and checks it is Streamlit's page, and runs
#                 the image's HEALTHCHECK command inside the container
# then prints a summary and removes the running containers (also on failure or Ctrl-C). Exit status 0 = pass.
#
# Knobs (environment): IMAGE (localhost/lensa:check), LESSON_IMAGE (localhost/lensa:check-lesson), LESSON_MAX_MB
# (400), BASE_IMAGE_NAME (localhost/lensa-check-base:bookworm-slim),
# BASE_REBUILD=1, DEBIAN_MIRROR (default: the one apt uses here), CACHE_DIR (~/.cache/lensa-container-check),
# TORCH_CPU_INDEX (https://download.pytorch.org/whl/cpu, tried first when reachable), PORT (a free one),
# WHEEL_PORT (38651), BUILD_TIMEOUT (1800 s), SERVE_TIMEOUT (180 s).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"

IMAGE="${IMAGE:-localhost/lensa:check}"
LESSON_IMAGE="${LESSON_IMAGE:-localhost/lensa:check-lesson}"
LESSON_MAX_MB="${LESSON_MAX_MB:-400}"
BASE_IMAGE_NAME="${BASE_IMAGE_NAME:-localhost/lensa-check-base:bookworm-slim}"
BASE_REBUILD="${BASE_REBUILD:-0}"
CACHE_DIR="${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lensa-container-check}"
TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
BUILD_TIMEOUT="${BUILD_TIMEOUT:-1800}"
SERVE_TIMEOUT="${SERVE_TIMEOUT:-180}"
PY_VERSION=3.11 # what the Dockerfile's base images carry, and what the wheelhouse is downloaded for

WORK="$(mktemp -d "${TMPDIR:-/tmp}/lensa-container-check.XXXXXX")"
CTRS=() # every working container we made, removed on exit
CTRS_BEFORE_BUILD="" # set while podman build runs: its working containers outlive a killed build
SERVER_PID=""
WHEEL_SERVER_PID=""
KEEP_WORK=1
declare -a TIMINGS=()

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1]); s.close()'
}
# Stop a process group we started (setsid made the child its leader) and wait for it.
stop_group() {
    local pid="$1"
    [[ -n "$pid" ]] || return 0
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_group "$SERVER_PID"
    stop_group "$WHEEL_SERVER_PID"
    if [[ -n "$CTRS_BEFORE_BUILD" ]]; then
        # Only the containers that appeared during our build, never anybody else's.
        timeout 60 buildah containers -a -q --notruncate 2>/dev/null | grep -vxF -f "$CTRS_BEFORE_BUILD" |
            xargs -r timeout 120 buildah rm >/dev/null 2>&1 || true
    fi
    for c in "${CTRS[@]}"; do
        timeout 60 buildah rm "$c" >/dev/null 2>&1 || echo "warning: could not remove working container $c" >&2
    done
    if [[ $rc -ne 0 ]]; then
        echo "container check FAILED (exit $rc); logs kept in $WORK" >&2
    elif [[ "$KEEP_WORK" == 0 ]]; then
        rm -rf "$WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

T_TOTAL="$(now_us)"

# ---------------------------------------------------------------- 1. tools
log "1/5 tools"
t="$(now_us)"
[[ "$(id -u)" -eq 0 ]] || die "needs root (debootstrap and rootful podman): sudo $0"
[[ -f requirements.txt && -f Dockerfile ]] || die "no requirements.txt or Dockerfile in $ROOT"
command -v python3 >/dev/null || die "python3 is needed on the host (pip download, free ports, wheel server)"
missing=()
for tool in podman buildah debootstrap curl; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
[[ -e /usr/share/keyrings/debian-archive-keyring.gpg ]] || missing+=(debian-archive-keyring)
((${#missing[@]} == 0)) || apt_install "${missing[@]}"
echo "$(podman --version) | $(buildah --version | cut -d' ' -f1-3) | debootstrap $(dpkg-query -W -f='${Version}' debootstrap 2>/dev/null || echo '?')"
TIMINGS+=("tools $(elapsed "$t") s")

# ---------------------------------------------------------------- 2. base image
log "2/5 base image $BASE_IMAGE_NAME"
t="$(now_us)"
if [[ "$BASE_REBUILD" != 1 ]] && timeout 60 podman image exists "$BASE_IMAGE_NAME"; then
    echo "cached: $BASE_IMAGE_NAME"
    base_note="cached"
else
    import_base_image "$BASE_IMAGE_NAME" podman
    base_note="built"
fi
TIMINGS+=("base image $(elapsed "$t") s ($base_note)")

# ---------------------------------------------------------------- 3. wheelhouse
log "3/5 wheelhouse"
t="$(now_us)"
WHEELHOUSE="$(wheelhouse_path)"
mkdir -p "$WHEELHOUSE"
pip_target_args
torch_req="$(torch_requirement)"
download_wheelhouse() {
    # The CPU torch wheel first: PyPI's torch is the multi-GB CUDA build. From the PyTorch CPU index when it
    # answers, otherwise from whatever pip is configured with here (this machine has the CPU wheel on disk).
    if [[ -n "$torch_req" ]] && ! compgen -G "$WHEELHOUSE/torch-*+cpu-*.whl" >/dev/null; then
        if curl -fsS -m 10 -o /dev/null "$TORCH_CPU_INDEX/torch/" 2>/dev/null; then
            echo "torch from $TORCH_CPU_INDEX"
            timeout 1200 python3 -m pip download -q --no-deps --index-url "$TORCH_CPU_INDEX" "${PIP_TARGET[@]}" \
                -d "$WHEELHOUSE" "$torch_req" >"$WORK/pip-torch.log" 2>&1 ||
                die "pip download $torch_req failed, see $WORK/pip-torch.log"
        else
            echo "$TORCH_CPU_INDEX unreachable; torch from this machine's pip sources"
        fi
    fi
    # --find-links the wheelhouse itself so the CPU torch already there (2.13.0+cpu sorts above 2.13.0) wins.
    timeout 1200 python3 -m pip download -q --find-links "$WHEELHOUSE" "${PIP_TARGET[@]}" \
        -d "$WHEELHOUSE" -r requirements.txt >"$WORK/pip-download.log" 2>&1 ||
        die "pip download -r requirements.txt failed, see $WORK/pip-download.log"
}
if [[ -e "$WHEELHOUSE/.complete" ]]; then
    wheel_note="cached"
else
    download_wheelhouse
    wheel_note="downloaded"
fi
[[ -z "$torch_req" ]] || check_torch_wheels "$WHEELHOUSE"
touch "$WHEELHOUSE/.complete"
echo "$(find "$WHEELHOUSE" -maxdepth 1 -name '*.whl' | wc -l) wheels, $(du -sh "$WHEELHOUSE" | cut -f1) in $WHEELHOUSE"
# A fixed port by default: WHEELHOUSE_URL is a build arg, and a new value would miss the layer cache.
WHEEL_PORT="${WHEEL_PORT:-38651}"
if ! python3 -c 'import socket, sys; socket.create_server(("127.0.0.1", int(sys.argv[1]))).close()' "$WHEEL_PORT" 2>/dev/null; then
    echo "port $WHEEL_PORT is taken; serving the wheels on a free port (the dependency layer will be rebuilt)"
    WHEEL_PORT="$(free_port)"
fi
serve_wheelhouse "$WHEELHOUSE" "$WHEEL_PORT"
echo "served on $WHEELHOUSE_URL"
TIMINGS+=("wheelhouse $(elapsed "$t") s ($wheel_note)")

# ---------------------------------------------------------------- 4. build
CTRS_BEFORE_BUILD="$WORK/containers-before-build"
{ timeout 60 buildah containers -a -q --notruncate || true; } >"$CTRS_BEFORE_BUILD"
echo "-" >>"$CTRS_BEFORE_BUILD" # never an empty pattern file: grep -v -f of nothing would select them all
build_image() { # name log extra-build-args... -> builds it, replaces the previous image of that name
    local name="$1" build_log="$2" old_id new_id
    shift 2
    old_id="$(timeout 60 podman image inspect --format '{{.Id}}' "$name" 2>/dev/null || true)"
    # chroot isolation: no network namespace, so RUN steps reach the wheel server on 127.0.0.1.
    if ! timeout --kill-after=30 "$BUILD_TIMEOUT" podman build --isolation=chroot --format docker --pull=never \
        --build-arg "BASE_IMAGE=$BASE_IMAGE_NAME" \
        --build-arg "WHEELHOUSE_URL=$WHEELHOUSE_URL" "$@" \
        -t "$name" -f Dockerfile . 2>&1 | tee "$build_log"; then
        die "podman build of $name failed or timed out after ${BUILD_TIMEOUT}s, see $build_log"
    fi
    new_id="$(timeout 60 podman image inspect --format '{{.Id}}' "$name")"
    if [[ -n "$old_id" && "$old_id" != "$new_id" ]]; then
        # The previous check image, now untagged; its shared layers stay as the build cache.
        timeout 120 podman rmi "$old_id" >/dev/null 2>&1 || true
    fi
}
log "4/5 build $IMAGE, with the lab (log: $WORK/build.log)"
t="$(now_us)"
build_image "$IMAGE" "$WORK/build.log"
TIMINGS+=("build $(elapsed "$t") s ($(grep -c -- '--> Using cache' "$WORK/build.log" || true) steps from cache)")
log "4/5 build $LESSON_IMAGE, lesson-only: WITH_TORCH=0 (log: $WORK/build-lesson.log)"
t="$(now_us)"
build_image "$LESSON_IMAGE" "$WORK/build-lesson.log" --build-arg WITH_TORCH=0
TIMINGS+=("lesson build $(elapsed "$t") s ($(grep -c -- '--> Using cache' "$WORK/build-lesson.log" || true) steps from cache)")
CTRS_BEFORE_BUILD=""
stop_group "$WHEEL_SERVER_PID"
WHEEL_SERVER_PID=""

json_argv() { # JSON array (optionally dropping the first N items) -> NUL-separated argv
    python3 -c 'import json, sys; a = json.loads(sys.argv[1]); a = a if isinstance(a, list) else a["Test"]
sys.stdout.write("".join(x + "\0" for x in a[int(sys.argv[2]):]))' "$1" "$2"
}
image_bytes() { timeout 60 podman image inspect --format '{{.Size}}' "$1"; }

# ---------------------------------------------------------------- 5. serve
declare -a SUMMARY=()
serve_check() { # image label probe-python -> serves it, checks it, appends to SUMMARY
    local image="$1" label="$2" probe="$3" port ctr health health_rc page page_code page_title page_bytes t_healthy
    local image_user image_cmd_json health_json image_ports inside size deadline
    inspect() { timeout 60 podman image inspect --format "$1" "$image"; }
    size="$(image_bytes "$image" | awk '{ printf "%.1f MB (%d bytes)", $1 / 1e6, $1 }')"
    image_user="$(inspect '{{.Config.User}}')"
    image_cmd_json="$(inspect '{{json .Config.Cmd}}')"
    health_json="$(inspect '{{json .Config.Healthcheck}}')"
    image_ports="$(inspect '{{json .Config.ExposedPorts}}')"
    [[ -n "$image_user" && "$image_user" != root && "$image_user" != 0 && "${image_user%%:*}" != 0 ]] ||
        die "$image runs as root (User: '${image_user}')"
    [[ "$health_json" == *_stcore/health* ]] || die "$image has no HEALTHCHECK on /_stcore/health: $health_json"
    [[ "$image_ports" == *8501/tcp* ]] || die "$image does not EXPOSE 8501: $image_ports"
    local -a image_cmd health_cmd
    mapfile -d '' image_cmd < <(json_argv "$image_cmd_json" 0)
    mapfile -d '' health_cmd < <(json_argv "$health_json" 1) # drop "CMD"
    ((${#image_cmd[@]})) || die "$image has no CMD"

    port="$(free_port)"
    log "5/5 serve $image: ${image_cmd[*]} with STREAMLIT_SERVER_PORT=$port (log: $WORK/serve-$label.log)"
    local t
    t="$(now_us)"
    ctr="$(timeout 120 buildah from --pull=never --name "lensa-check-$label-$$" "$image")"
    CTRS+=("$ctr")
    # buildah run keeps the image's USER, WORKDIR and ENV; chroot isolation shares this host's network.
    setsid timeout "$((SERVE_TIMEOUT + 120))" buildah run --isolation chroot \
        --env "STREAMLIT_SERVER_PORT=$port" "$ctr" -- "${image_cmd[@]}" >"$WORK/serve-$label.log" 2>&1 &
    SERVER_PID=$!
    health=""
    deadline=$((SECONDS + SERVE_TIMEOUT))
    while ((SECONDS < deadline)); do
        health="$(curl -sS -m 3 "http://127.0.0.1:$port/_stcore/health" 2>/dev/null || true)"
        [[ "$health" == ok ]] && break
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            tail -n 30 "$WORK/serve-$label.log" >&2
            die "the server of $image exited before it was healthy"
        fi
        sleep 0.5
    done
    if [[ "$health" != ok ]]; then
        tail -n 30 "$WORK/serve-$label.log" >&2
        die "/_stcore/health of $image did not answer ok within ${SERVE_TIMEOUT}s (last answer: '${health}')"
    fi
    t_healthy="$(elapsed "$t")"

    page="$WORK/index-$label.html"
    page_code="$(curl -sS -m 20 -o "$page" -w '%{http_code}' "http://127.0.0.1:$port/")" || die "GET / failed"
    [[ "$page_code" == 200 ]] || die "GET / of $image answered HTTP $page_code"
    if ! grep -q '<div id="root">' "$page" || ! grep -q '<title>Streamlit</title>' "$page" ||
        ! grep -q 'src="./static/js/' "$page"; then
        die "GET / of $image is not Streamlit's page: $(head -c 300 "$page")"
    fi
    page_title="$(sed -n 's:.*<title>\([^<]*\)</title>.*:\1:p' "$page" | head -n 1)"
    page_bytes="$(wc -c <"$page")"

    # The image's own HEALTHCHECK command, run inside the container against the server above.
    health_rc=0
    timeout 60 buildah run --isolation chroot --env "STREAMLIT_SERVER_PORT=$port" "$ctr" -- "${health_cmd[@]}" \
        >"$WORK/healthcheck-$label.log" 2>&1 || health_rc=$?
    [[ $health_rc -eq 0 ]] || die "the HEALTHCHECK command of $image exited $health_rc, see $WORK/healthcheck-$label.log"
    inside="$(timeout 60 buildah run --isolation chroot "$ctr" -- python3 -c "$probe")" ||
        die "the check inside $image failed: $inside"
    TIMINGS+=("$label serve to healthy $t_healthy s")
    stop_group "$SERVER_PID"
    SERVER_PID=""
    SUMMARY+=(
        "image        $image  $size  (base $BASE_IMAGE_NAME, user $image_user)"
        "  inside     $inside"
        "  cmd        ${image_cmd[*]}  (served on 0.0.0.0:$port via STREAMLIT_SERVER_PORT)"
        "  health     GET /_stcore/health -> $health; the image's HEALTHCHECK inside the container -> exit $health_rc"
        "  page       GET / -> HTTP $page_code, $page_bytes bytes, <title>$page_title</title>, Streamlit's root div and JS bundle"
    )
}
PROBE_PREFIX='import os, sys, streamlit; head = f"uid {os.getuid()}, cwd {os.getcwd()}, {sys.executable}, python {sys.version.split()[0]}, streamlit {streamlit.__version__}"'
serve_check "$IMAGE" lab "$PROBE_PREFIX
import torch; print(f\"{head}, torch {torch.__version__} (cuda {torch.version.cuda})\")"
serve_check "$LESSON_IMAGE" lesson "$PROBE_PREFIX
import importlib.util as u; assert u.find_spec(\"torch\") is None, \"torch is in the lesson image\"
print(f\"{head}, no torch\")"

lesson_bytes="$(image_bytes "$LESSON_IMAGE")"
lab_bytes="$(image_bytes "$IMAGE")"
((lesson_bytes <= LESSON_MAX_MB * 1000000)) ||
    die "the lesson image $LESSON_IMAGE is $((lesson_bytes / 1000000)) MB, over LESSON_MAX_MB=$LESSON_MAX_MB"
KEEP_WORK=0
TIMINGS+=("total $(elapsed "$T_TOTAL") s")

log "container check: PASS"
printf '  %s\n' "${SUMMARY[@]}"
awk -v lab="$lab_bytes" -v lesson="$lesson_bytes" -v max="$LESSON_MAX_MB" 'BEGIN {
    printf "  sizes        with the lab %.1f MB, lesson-only %.1f MB (limit %d MB)\n", lab / 1e6, lesson / 1e6, max }'
printf '  timings      %s' "${TIMINGS[0]}"
printf ' | %s' "${TIMINGS[@]:1}"
printf '\n'
