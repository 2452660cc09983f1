# Lensa · Mixed Precision as a container: Streamlit on 0.0.0.0:8501, the CPU build of torch by default
# (or none: WITH_TORCH=0 below).
#
#   docker build -t lensa .
#   docker run --rm -p 8501:8501 lensa                      # then open http://localhost:8501
#
# Build args, all optional:
#   BASE_IMAGE       a Debian-like image with Python 3.11 (python3 + venv) on its PATH. The default is the
#                    official slim image; scripts/container_check.sh passes a local debootstrap image instead.
#   TORCH_INDEX_URL  where torch comes from: the CPU wheels (default), or a CUDA build, e.g.
#                    --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126
#   WITH_TORCH       1 (default): the image with the lab. 0: the lesson-only image, no torch and no live runs
#                    (the pages say how to add them), under 400 MB: docker build --build-arg WITH_TORCH=0 -t lensa:lesson .
#   PIP_INDEX_URL    the index for everything else (a company mirror works too).
#   WHEELHOUSE_URL   when set, every package comes from this pip --find-links location (a directory of wheels
#                    from `pip download -r requirements.txt`, served over HTTP) and no index is contacted.
#                    A server on the build host needs `docker build --network=host`.
#
# The port follows STREAMLIT_SERVER_PORT (docker run -e STREAMLIT_SERVER_PORT=9000 -p 9000:9000 ...), and the
# HEALTHCHECK follows it too.

ARG BASE_IMAGE=python:3.11.13-slim-bookworm
# checkov:skip=CKV_DOCKER_7:FROM names the base through BASE_IMAGE, whose default above is a pinned tag; checkov reads the unexpanded variable as an untagged image

# ---- deps: a virtual environment at /opt/venv with requirements.txt installed; only the venv is kept ----
FROM ${BASE_IMAGE} AS deps

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG WHEELHOUSE_URL=
ARG WITH_TORCH=1

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DEFAULT_TIMEOUT=60

SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
WORKDIR /build
# Only the requirements and the script that installs torch from them: code changes do not invalidate this (slow)
# layer.
COPY requirements.txt ./
COPY scripts/install_torch.py scripts/

# requirements.txt is the one place versions are pinned. Without torch (WITH_TORCH=0) its torch and numba lines are
# dropped (numba compiles only what the live parts compute).
# With torch, torch comes first, from TORCH_INDEX_URL and at the version requirements.txt pins (the same
# scripts/install_torch.py that `make run` uses), so that the pip install -r that follows finds it satisfied
# (torch==2.13.0 accepts 2.13.0+cpu) instead of pulling PyPI's CUDA build.
RUN python3 -m venv /opt/venv; \
    live_only='^[[:space:]]*(torch|numba)[[:space:]]*[=<>~!]'; \
    if [ "${WITH_TORCH}" = 0 ]; then sed -E -e "/${live_only}/d" requirements.txt >app-requirements.txt; \
    else cp requirements.txt app-requirements.txt; fi; \
    if [ -n "${WHEELHOUSE_URL}" ]; then \
        /opt/venv/bin/pip install --no-cache-dir --no-index --find-links "${WHEELHOUSE_URL}" -r app-requirements.txt; \
    elif [ "${WITH_TORCH}" = 0 ]; then \
        /opt/venv/bin/pip install --no-cache-dir --index-url "${PIP_INDEX_URL}" -r app-requirements.txt; \
    else \
        TORCH_INDEX_URL="${TORCH_INDEX_URL}" /opt/venv/bin/python scripts/install_torch.py; \
        /opt/venv/bin/pip install --no-cache-dir --index-url "${PIP_INDEX_URL}" -r app-requirements.txt; \
    fi; \
    /opt/venv/bin/pip check; \
    if [ "${WITH_TORCH}" = 0 ]; then \
        /opt/venv/bin/python -c "import importlib.util as u, streamlit; assert u.find_spec('torch') is None; print('streamlit', streamlit.__version__, '| no torch')"; \
    else \
        /opt/venv/bin/python -c "import streamlit, torch; print('streamlit', streamlit.__version__, '| torch', torch.__version__, '| cuda', torch.version.cuda)"; \
    fi

# The lesson-only image is kept small (at most 400 MB, scripts/container_check.sh checks): what only development,
# notebooks or other formats use goes (pip, the packages' tests and headers, Jupyter bundles and plotly.js for HTML
# export, pyarrow's Flight and S3 libraries, Pillow's AVIF codec), and so do altair and its jsonschema, which only
# Streamlit's built-in charts use and no page does (tests/test_without_torch.py opens every page without them),
# the shared libraries lose their symbol tables (binutils' strip; not the *.libs ones auditwheel patched, which strip
# breaks; skipped where apt cannot reach a mirror), and no bytecode is kept (~110 MB: the server compiles what it
# imports at start-up, a second or two more). The image with the lab is left as pip made it.
# hadolint ignore=DL3009
RUN if [ "${WITH_TORCH}" = 0 ]; then \
        sp=/opt/venv/lib/python3.11/site-packages; \
        /opt/venv/bin/python -m pip uninstall -q -y altair jsonschema jsonschema-specifications referencing rpds-py \
            pip setuptools; \
        find /opt/venv -name __pycache__ -type d -prune -exec rm -rf {} +; \
        find "${sp}" -name tests -type d -prune -exec rm -rf {} +; \
        find "${sp}" \( -name '*.pyx' -o -name '*.pxd' -o -name '*.pyi' \) -delete; \
        rm -rf "${sp}"/pyarrow/include "${sp}"/pyarrow/*flight* "${sp}"/pyarrow/_s3fs.* "${sp}"/pyarrow/libarrow_s3.* \
            "${sp}"/pydeck/nbextension/static "${sp}"/plotly/labextension "${sp}"/plotly/package_data/widgetbundle.js \
            "${sp}"/plotly/package_data/plotly.min.js \
            "${sp}"/numpy/_core/include "${sp}"/numpy/f2py/src "${sp}"/PIL/_avif.* "${sp}"/pillow.libs/libavif-*; \
        set -- "${sp}"/pyarrow/libarrow_python.so.*.*.*; real="$(basename "$1")"; \
        for lib in "${sp}"/pyarrow/libarrow_python.so "${sp}"/pyarrow/libarrow_python.so.[0-9]*; do \
            [ "$(basename "${lib}")" = "${real}" ] || ln -sf "${real}" "${lib}"; \
        done; \
        if timeout 120 apt-get update -qq && timeout 300 apt-get install -y -qq --no-install-recommends binutils=2.40-2; then \
            find "${sp}" -path '*.libs' -prune -o -type f \( -name '*.so' -o -name '*.so.[0-9]*' \) \
                -exec strip --strip-unneeded {} +; \
        else \
            echo "binutils unavailable: the shared libraries keep their symbol tables"; \
        fi; \
        /opt/venv/bin/python -B -c "import streamlit.web.bootstrap, pandas, pyarrow.pandas_compat, plotly.graph_objs, plotly.io, pydeck, ml_dtypes, PIL.Image"; \
    fi

# ---- runtime ----
FROM ${BASE_IMAGE}

ENV PATH="/opt/venv/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    STREAMLIT_SERVER_ADDRESS=0.0.0.0 \
    STREAMLIT_SERVER_PORT=8501 \
    STREAMLIT_SERVER_FILE_WATCHER_TYPE=none \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false \
    NUMBA_CACHE_DIR=/tmp/lensa-numba

# An unprivileged user; the code and the venv stay root-owned and read-only to it.
RUN groupadd --gid 10001 lensa \
    && useradd --no-log-init --uid 10001 --gid lensa --create-home --home-dir /home/lensa --shell /usr/sbin/nologin lensa

COPY --from=deps /opt/venv /opt/venv

WORKDIR /app
# .dockerignore keeps the venv, tests, caches, docs and scripts out; .streamlit/config.toml comes along
# (headless, no usage statistics, XSRF protection, toolbar "viewer"), and so does LICENSE.
COPY . .

USER 10001:10001
EXPOSE 8501

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request as u; r = u.urlopen('http://localhost:%s/_stcore/health' % os.environ.get('STREAMLIT_SERVER_PORT', '8501'), timeout=4); raise SystemExit(r.read() != b'ok')"]

# Serves on STREAMLIT_SERVER_ADDRESS:STREAMLIT_SERVER_PORT, i.e. 0.0.0.0:8501 (see ENV above).
CMD ["python3", "-m", "lensa.ui.serve"]
