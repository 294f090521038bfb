# noa: reshape, reorder and convert MRC/TIFF stacks; the `noa` CLI and its HTTP service.
#
#   docker build -t noa .
#   docker run --rm -v "$PWD:/data" noa permute /data/in.mrc /data/out.mrc --axes 0,1,3,2
#   docker run --rm -p 8000:8000 -v "$PWD:/data" noa serve --host 0.0.0.0
#
# Where no registry is reachable, build a Debian bookworm base locally and pass it as BASE_IMAGE
# (scripts/image does this with debootstrap). A TLS-intercepting proxy's CA bundle can be given to
# pip with `--secret id=pip_cert,src=/etc/ssl/certs/ca-certificates.crt`.

ARG BASE_IMAGE=python:3.11-slim-bookworm

# ---- build: the project and its extras in a virtual environment --------------------------------
FROM ${BASE_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml README.md ./
COPY noa_core ./noa_core
COPY noa_cli ./noa_cli
COPY server ./server
# The cache mount keeps downloaded wheels between builds without putting them in a layer; the
# test suites of numpy and numba (about 30 MB) are never run here.
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
    && python3 -m venv /opt/noa \
    && /opt/noa/bin/pip install ".[serve,dask]" \
    && find /opt/noa/lib -depth -type d -name tests -path '*/site-packages/num*' -exec rm -rf {} +

# ---- runtime ---------------------------------------------------------------------------------------
FROM ${BASE_IMAGE}

# noa pins a thread-safe numba threading layer (kernels run from the service's worker threads):
# TBB, from the tbb wheel in the venv; libgomp1 gives the OpenMP fallback. Exact Debian versions
# are not pinned: security updates remove them.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --gid 0 --create-home --home-dir /home/noa --shell /usr/sbin/nologin noa \
    && mkdir -p /data /opt/noa-cache \
    && chown 10001:0 /data /opt/noa-cache /home/noa \
    && chmod 2775 /data /opt/noa-cache /home/noa

COPY --from=build /opt/noa /opt/noa

# NUMBA_CACHE_DIR holds the kernels compiled below. Group 0 may write it (OpenShift-style random
# UIDs); any other user, a read-only root or an Apptainer image falls back to a writable cache
# (noa_core/runtime.py: $HOME/.cache, else /tmp) and compiles there on first use. HOME is fixed so
# that an arbitrary --user never gets the working directory, /data, as its cache.
ENV PATH=/opt/noa/bin:$PATH \
    HOME=/home/noa \
    NUMBA_CACHE_DIR=/opt/noa-cache \
    NOA_DATA_ROOT=/data \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

USER 10001:0
RUN noa warmup && chmod -R g=u /opt/noa-cache

WORKDIR /data
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
ENTRYPOINT ["noa"]
CMD ["serve", "--host", "0.0.0.0"]

# Last, so that a new revision or date does not invalidate the cached layers above.
ARG BASE_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="noa" \
      org.opencontainers.image.description="Reshape, reorder and convert MRC and TIFF image stacks (CLI and HTTP service)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="BSD-3-Clause" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
