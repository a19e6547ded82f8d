# syntax=docker/dockerfile:1.7
# One image for every gpusched service: `docker run IMAGE <command>` runs `gpusched <command>`
# (sink, process, forecast serve, dispatch, api, collect, simcluster, topics ensure, store
# migrate, ...). Built in two stages with uv: the dependencies first, from every workspace
# member's pyproject.toml and uv.lock (a layer that changes only when they do), then the
# source, installed as wheels. Migrations (gpusched.store) and the topic declarations
# (gpusched.contracts) ship inside those packages. tests/integration/test_deploy.py runs
# this file's COPY and `uv sync` steps without an engine.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ghcr.io/astral-sh/uv:0.13.9 AS uv

FROM ${PYTHON_IMAGE} AS build
COPY --from=uv /uv /bin/uv
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=0 \
    UV_PROJECT_ENVIRONMENT=/app/.venv
WORKDIR /src
COPY pyproject.toml uv.lock ./
COPY libs/core/pyproject.toml libs/core/
COPY libs/contracts/pyproject.toml libs/contracts/
COPY libs/store/pyproject.toml libs/store/
COPY libs/sim/pyproject.toml libs/sim/
COPY services/api/pyproject.toml services/api/
COPY services/collector/pyproject.toml services/collector/
COPY services/dispatcher/pyproject.toml services/dispatcher/
COPY services/forecaster/pyproject.toml services/forecaster/
COPY services/processor/pyproject.toml services/processor/
COPY services/simcluster/pyproject.toml services/simcluster/
COPY services/sink/pyproject.toml services/sink/
COPY infra/local/pyproject.toml infra/local/
COPY cli/pyproject.toml cli/
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-install-workspace
COPY libs/ libs/
COPY services/ services/
COPY infra/local/ infra/local/
COPY cli/ cli/
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable

FROM ${PYTHON_IMAGE}
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /var/lib/gpusched gpusched
COPY --from=build --chown=gpusched:gpusched /app/.venv /app/.venv
ENV PATH=/app/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1
USER 10001:10001
# state that a service keeps on local disk (the processor's tables, an embedded store)
# lives under the working directory's var/ unless settings say otherwise
WORKDIR /var/lib/gpusched
EXPOSE 18080 18123
ENTRYPOINT ["gpusched"]
CMD ["--help"]
