#!/usr/bin/env bash
# deploy/compose.yaml on this machine's Docker Engine, with every image made here: no image registry is needed,
# only a Debian mirror and a Python package index (or this machine's own pip sources).
#
#   sudo scripts/compose_stack.sh up       # make compose-up: build what is missing or stale, start, wait for health
#   sudo scripts/compose_stack.sh down     # make compose-down: stop and remove the stack's containers and network
#   sudo scripts/compose_stack.sh images   # only build the images
#
# up, in phases, each under a timeout:
#   1. engine      Docker Engine and Compose from Debian (docker.io, docker-compose) when missing; starts dockerd
#                  in the background when no daemon answers (its log: $CACHE_DIR/dockerd.log)
#   2. base        a Debian bookworm image (python3 3.11 + venv) made with debootstrap and imported into Docker,
#                  standing in for python:3.11-slim and debian:bookworm-slim; kept between runs (BASE_REBUILD=1)
#   3. wheelhouse  pip downloads requirements.txt for CPython 3.11 (CPU torch), cached per requirements.txt (shared
#                  with scripts/container_check.sh), served on 127.0.0.1 for the build
#   4. images      docker build of the real Dockerfile (the app, LENSA_IMAGE) and of deploy/nginx/Dockerfile
#                  (Debian's nginx, LENSA_NGINX_IMAGE); Docker's layer cache makes a rebuild of unchanged code quick
#   5. stack       compose up -d --no-build with those images, then waits until every replica and nginx are
#                  healthy and http://LENSA_ADDRESS:LENSA_PORT/healthz answers ok
#
# Knobs (environment): LENSA_PROJECT (lensa, compose's project name), LENSA_PORT (8080), LENSA_ADDRESS (127.0.0.1), LENSA_REPLICAS (3), LENSA_IMAGE
# (localhost/lensa:compose), LENSA_NGINX_IMAGE (localhost/lensa-nginx:bookworm), LENSA_BASE_IMAGE
# (localhost/lensa-base:bookworm-slim), WITH_TORCH (1; 0 builds the lesson-only image), LENSA_COOKIE_SECRET (made
# once and kept in $CACHE_DIR/cookie-secret when unset), BASE_REBUILD=1, DEBIAN_MIRROR, CACHE_DIR
# (~/.cache/lensa-container-check), WHEEL_PORT (38652), UP_TIMEOUT (300 s, for the stack to become healthy).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"

ACTION="${1:-up}"
export LENSA_PORT="${LENSA_PORT:-8080}"
export LENSA_ADDRESS="${LENSA_ADDRESS:-127.0.0.1}"
REPLICAS="${LENSA_REPLICAS:-3}"
export LENSA_IMAGE="${LENSA_IMAGE:-localhost/lensa:compose}"
export LENSA_NGINX_IMAGE="${LENSA_NGINX_IMAGE:-localhost/lensa-nginx:bookworm}"
BASE_IMAGE_NAME="${LENSA_BASE_IMAGE:-localhost/lensa-base:bookworm-slim}"
WITH_TORCH="${WITH_TORCH:-1}"
BASE_REBUILD="${BASE_REBUILD:-0}"
CACHE_DIR="${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lensa-container-check}"
UP_TIMEOUT="${UP_TIMEOUT:-300}"
PY_VERSION=3.11
COMPOSE_FILE="$ROOT/deploy/compose.yaml"
PROJECT="${LENSA_PROJECT:-lensa}" # compose's project name: the containers are PROJECT_app_N (v1), PROJECT-app-N (v2)
# Debian's nginx (1.22) has no `resolve` on server lines: it resolves "app" once, at start, to every replica's
# address (compose starts nginx only when all are healthy). A replica the engine restarts comes back on its own
# address on this network, so nginx finds it again (deploy/compose.yaml says more).
if [[ "$LENSA_NGINX_IMAGE" != nginx:* && -z "${LENSA_UPSTREAM_SERVERS:-}" ]]; then
    export LENSA_UPSTREAM_SERVERS="server app:8501 max_fails=1 fail_timeout=10s;"
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/lensa-compose.XXXXXX")"
WHEEL_SERVER_PID=""
declare -a TIMINGS=()

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n "$WHEEL_SERVER_PID" ]] && kill -0 "$WHEEL_SERVER_PID" 2>/dev/null; then
        kill -TERM -- "-$WHEEL_SERVER_PID" 2>/dev/null || kill -TERM "$WHEEL_SERVER_PID" 2>/dev/null || true
        wait "$WHEEL_SERVER_PID" 2>/dev/null || true
    fi
    if [[ $rc -ne 0 ]]; then
        echo "compose stack: FAILED (exit $rc); logs kept in $WORK" >&2
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The Debian docker CLI talks to the Debian daemon at the same API version; any other `docker` on PATH is used
# only when that one is absent.
docker_bin() { if [[ -x /usr/bin/docker ]]; then echo /usr/bin/docker; else command -v docker; fi; }
DOCKER=""
COMPOSE=()
find_compose() {
    # Compose v2 (the docker CLI plugin) when there is one, else Compose 1.29 (Debian bookworm's docker-compose).
    if "$DOCKER" compose version >/dev/null 2>&1; then
        COMPOSE=("$DOCKER" compose)
    elif command -v docker-compose >/dev/null; then
        COMPOSE=(docker-compose --compatibility)
    else
        return 1
    fi
}
compose() { # seconds compose-arguments...
    local limit="$1"
    shift
    timeout "$limit" "${COMPOSE[@]}" -p "$PROJECT" -f "$COMPOSE_FILE" "$@"
}

cookie_secret() {
    if [[ -z "${LENSA_COOKIE_SECRET:-}" ]]; then
        mkdir -p "$CACHE_DIR"
        if [[ ! -s "$CACHE_DIR/cookie-secret" ]]; then
            (umask 077 && python3 -c 'import secrets; print(secrets.token_hex(32))' >"$CACHE_DIR/cookie-secret")
        fi
        LENSA_COOKIE_SECRET="$(cat "$CACHE_DIR/cookie-secret")"
    fi
    export LENSA_COOKIE_SECRET
}

# ---------------------------------------------------------------- 1. engine
engine() {
    local t missing=()
    t="$(now_us)"
    log "1/5 engine"
    [[ "$(id -u)" -eq 0 ]] || die "needs root (apt-get, dockerd, debootstrap): sudo $0 $ACTION"
    [[ -x /usr/bin/docker || -n "$(command -v docker || true)" ]] && command -v dockerd >/dev/null || missing+=(docker.io)
    command -v docker-compose >/dev/null || missing+=(docker-compose)
    ((${#missing[@]} == 0)) || apt_install "${missing[@]}"
    DOCKER="$(docker_bin)"
    if ! timeout 20 "$DOCKER" info >/dev/null 2>&1; then
        mkdir -p "$CACHE_DIR"
        echo "starting dockerd (log: $CACHE_DIR/dockerd.log)"
        setsid dockerd >"$CACHE_DIR/dockerd.log" 2>&1 </dev/null &
        for _ in $(seq 1 120); do
            timeout 5 "$DOCKER" info >/dev/null 2>&1 && break
            sleep 0.5
        done
        timeout 20 "$DOCKER" info >/dev/null 2>&1 || die "dockerd did not answer within 60 s, see $CACHE_DIR/dockerd.log"
    fi
    find_compose || die "no docker compose nor docker-compose"
    echo "$("$DOCKER" version --format 'Docker Engine {{.Server.Version}} (API {{.Server.APIVersion}})') | $("${COMPOSE[@]}" version --short 2>/dev/null || "${COMPOSE[@]}" version | head -n 1) (${COMPOSE[*]})"
    TIMINGS+=("engine $(elapsed "$t") s")
}

# ---------------------------------------------------------------- 2. base image
base_image() {
    local t note
    t="$(now_us)"
    log "2/5 base image $BASE_IMAGE_NAME"
    if [[ "$BASE_REBUILD" != 1 ]] && timeout 60 "$DOCKER" image inspect "$BASE_IMAGE_NAME" >/dev/null 2>&1; then
        echo "cached: $BASE_IMAGE_NAME"
        note=cached
    else
        if ! command -v debootstrap >/dev/null || [[ ! -e /usr/share/keyrings/debian-archive-keyring.gpg ]]; then
            DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -q debootstrap debian-archive-keyring \
                >"$WORK/apt-debootstrap.log" 2>&1 || die "apt-get install debootstrap failed, see $WORK/apt-debootstrap.log"
        fi
        import_base_image "$BASE_IMAGE_NAME" "$DOCKER"
        note=built
    fi
    TIMINGS+=("base image $(elapsed "$t") s ($note)")
}

# ---------------------------------------------------------------- 3. wheelhouse
wheelhouse() {
    local t note torch_req wheelhouse_dir
    t="$(now_us)"
    log "3/5 wheelhouse"
    wheelhouse_dir="$(wheelhouse_path)"
    mkdir -p "$wheelhouse_dir"
    pip_target_args
    torch_req="$(torch_requirement)"
    if [[ -e "$wheelhouse_dir/.complete" ]]; then
        note=cached
    else
        # As scripts/container_check.sh: the CPU torch wheel first (PyPI's torch is the multi-GB CUDA build), from
        # the PyTorch CPU index when it answers, otherwise from whatever pip is configured with here.
        local torch_index="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
        if [[ -n "$torch_req" ]] && ! compgen -G "$wheelhouse_dir/torch-*+cpu-*.whl" >/dev/null &&
            curl -fsS -m 10 -o /dev/null "$torch_index/torch/" 2>/dev/null; then
            timeout 1200 python3 -m pip download -q --no-deps --index-url "$torch_index" "${PIP_TARGET[@]}" \
                -d "$wheelhouse_dir" "$torch_req" >"$WORK/pip-torch.log" 2>&1 ||
                die "pip download $torch_req failed, see $WORK/pip-torch.log"
        fi
        timeout 1200 python3 -m pip download -q --find-links "$wheelhouse_dir" "${PIP_TARGET[@]}" \
            -d "$wheelhouse_dir" -r requirements.txt >"$WORK/pip-download.log" 2>&1 ||
            die "pip download -r requirements.txt failed, see $WORK/pip-download.log"
        note=downloaded
    fi
    [[ -z "$torch_req" ]] || check_torch_wheels "$wheelhouse_dir"
    touch "$wheelhouse_dir/.complete"
    echo "$(find "$wheelhouse_dir" -maxdepth 1 -name '*.whl' | wc -l) wheels, $(du -sh "$wheelhouse_dir" | cut -f1) in $wheelhouse_dir"
    # A fixed port: WHEELHOUSE_URL is a build argument, and a new value would miss Docker's layer cache.
    WHEEL_PORT="${WHEEL_PORT:-38652}"
    python3 -c 'import socket, sys; socket.create_server(("127.0.0.1", int(sys.argv[1]))).close()' "$WHEEL_PORT" \
        2>/dev/null || die "port $WHEEL_PORT (the wheel server) is taken; set WHEEL_PORT"
    serve_wheelhouse "$wheelhouse_dir" "$WHEEL_PORT"
    TIMINGS+=("wheelhouse $(elapsed "$t") s ($note)")
}

# ---------------------------------------------------------------- 4. images
build() { # name log docker-build-args... ; --network=host: RUN steps reach the wheel server and the Debian mirror
    local name="$1" build_log="$2" old_id new_id
    shift 2
    old_id="$(timeout 60 "$DOCKER" image inspect --format '{{.Id}}' "$name" 2>/dev/null || true)"
    if ! timeout --kill-after=30 1800 "$DOCKER" build --network=host -t "$name" "$@" >"$build_log" 2>&1; then
        tail -n 30 "$build_log" >&2
        die "docker build of $name failed or timed out, see $build_log"
    fi
    new_id="$(timeout 60 "$DOCKER" image inspect --format '{{.Id}}' "$name")"
    if [[ -n "$old_id" && "$old_id" != "$new_id" ]]; then
        # The previous image, now untagged; its shared layers stay as the build cache.
        timeout 120 "$DOCKER" rmi "$old_id" >/dev/null 2>&1 || true
    fi
}
images() {
    local t
    base_image
    wheelhouse
    log "4/5 images: $LENSA_IMAGE (WITH_TORCH=$WITH_TORCH) and $LENSA_NGINX_IMAGE"
    t="$(now_us)"
    build "$LENSA_IMAGE" "$WORK/build-app.log" --build-arg "BASE_IMAGE=$BASE_IMAGE_NAME" \
        --build-arg "WHEELHOUSE_URL=$WHEELHOUSE_URL" --build-arg "WITH_TORCH=$WITH_TORCH" -f Dockerfile .
    TIMINGS+=("app image $(elapsed "$t") s ($(grep -c 'Using cache' "$WORK/build-app.log" || true) steps from cache)")
    t="$(now_us)"
    build "$LENSA_NGINX_IMAGE" "$WORK/build-nginx.log" --build-arg "BASE_IMAGE=$BASE_IMAGE_NAME" \
        -f deploy/nginx/Dockerfile deploy/nginx
    TIMINGS+=("nginx image $(elapsed "$t") s ($(grep -c 'Using cache' "$WORK/build-nginx.log" || true) steps from cache)")
    kill -TERM -- "-$WHEEL_SERVER_PID" 2>/dev/null || true
    wait "$WHEEL_SERVER_PID" 2>/dev/null || true
    WHEEL_SERVER_PID=""
    printf '%s\n' "$("$DOCKER" image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' |
        grep -E "^(${LENSA_IMAGE%:*}|${LENSA_NGINX_IMAGE%:*}|${BASE_IMAGE_NAME%:*}):" || true)"
}

# ---------------------------------------------------------------- 5. stack
stack_up() {
    local t deadline ids states health=""
    t="$(now_us)"
    log "5/5 stack: $REPLICAS replicas behind nginx on http://$LENSA_ADDRESS:$LENSA_PORT"
    cookie_secret
    # --scale: deploy.replicas says 3 (Compose 1.29 reads it, and deploy.resources, in --compatibility mode only).
    compose 600 up -d --no-build --remove-orphans --scale "app=$REPLICAS" >"$WORK/up.log" 2>&1 || {
        cat "$WORK/up.log" >&2
        die "compose up failed"
    }
    deadline=$((SECONDS + UP_TIMEOUT))
    while ((SECONDS < deadline)); do
        mapfile -t ids < <(compose 60 ps -q)
        if ((${#ids[@]} == REPLICAS + 1)); then
            states="$("$DOCKER" inspect --format '{{.Name}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}' "${ids[@]}")"
            if ! grep -qv ' running healthy$' <<<"$states"; then
                health="$(curl -sS -m 5 "http://127.0.0.1:$LENSA_PORT/healthz" 2>/dev/null || true)"
                [[ "$health" == ok ]] && break
            fi
        fi
        sleep 1
    done
    [[ "$health" == ok ]] || {
        compose 60 ps >&2 || true
        compose 60 logs --tail 30 >&2 || true
        die "the stack was not healthy within ${UP_TIMEOUT}s"
    }
    TIMINGS+=("stack healthy $(elapsed "$t") s")
    printf '%s\n' "$states"
}

case "$ACTION" in
up)
    T_TOTAL="$(now_us)"
    engine
    images
    stack_up
    TIMINGS+=("total $(elapsed "$T_TOTAL") s")
    log "compose stack: UP on http://$LENSA_ADDRESS:$LENSA_PORT (make compose-down takes it down)"
    printf '  timings  %s' "${TIMINGS[0]}"
    printf ' | %s' "${TIMINGS[@]:1}"
    printf '\n'
    ;;
images)
    engine
    images
    ;;
down)
    DOCKER="$(docker_bin)" || die "no docker here"
    find_compose || die "no docker compose nor docker-compose"
    export LENSA_COOKIE_SECRET="${LENSA_COOKIE_SECRET:-unused-by-down}"
    compose 300 down --remove-orphans --timeout 10
    ;;
*)
    die "usage: $0 up|down|images"
    ;;
esac
