# ghcr.io/qonnect/qonnect-gitops:<version>: `qonnect` as the entrypoint; the same image
# runs the leads (`lead ...`) and the agents (`agent`). Build:
#   docker build -t ghcr.io/qonnect/qonnect-gitops:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY qonnect_gitops ./qonnect_gitops
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
# The leads push and keep their mirror (pack-refs, commit-graph, gc) with the git
# command line; without it they fall back to libgit2 pushes and skip the upkeep.
RUN apt-get update && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /install /usr/local
# A numeric non-root user, so `runAsNonRoot: true` can verify it.
RUN groupadd --gid 65532 qonnect && useradd --uid 65532 --gid 65532 --no-create-home \
      --home-dir /tmp --shell /usr/sbin/nologin qonnect
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["qonnect"]
CMD ["--help"]
