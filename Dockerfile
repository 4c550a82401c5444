# pymq daemons in one image: `docker run IMAGE namesrv ...` or `docker run IMAGE broker ...`
# (deploy/docker/entrypoint.sh; any other command runs as given, e.g. `pymq-admin`).
# deploy/compose.yaml runs a whole cluster with Prometheus and Grafana from it.

# --- build: wheels for pymq and its runtime dependencies (with the metrics extra) ----------
# A C compiler and zlib's headers here only: pymq's wheel carries the compiled accelerator
# (pymq._speedups, built by setup.py; without a compiler pymq would run in pure Python).
FROM python:3.11-slim AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE pyspark_pymq.py ./
COPY pymq ./pymq
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[metrics]'

# --- run: no compiler, no build tree, no root ---------------------------------------------
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /tmp/wheels
RUN pip install --no-cache-dir --no-index --find-links /tmp/wheels 'pymq-rocket[metrics]' \
    && rm -rf /tmp/wheels \
    && groupadd --system --gid 10001 pymq \
    && useradd --system --uid 10001 --gid pymq --home-dir /var/lib/pymq --shell /usr/sbin/nologin pymq \
    && mkdir -p /var/lib/pymq/store \
    && chown -R pymq:pymq /var/lib/pymq
COPY --chmod=0755 deploy/docker/entrypoint.sh /usr/local/bin/pymq-entrypoint
USER pymq:pymq
WORKDIR /var/lib/pymq
# The broker's store (commitlog, consume queues, index, offsets): keep it on a volume.
VOLUME ["/var/lib/pymq/store"]
# nameserver 9876 (metrics 9976), broker 10911 (metrics 10919)
EXPOSE 9876 9976 10911 10919
ENTRYPOINT ["pymq-entrypoint"]
CMD ["namesrv"]
