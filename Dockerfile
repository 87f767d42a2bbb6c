# remediator controller image: `remediator run --config /etc/remediator/config.yaml`.
# Build: docker build -t REGISTRY/remediator:0.1.0 .

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/remediator/venv
COPY pyproject.toml README.md ./
COPY remediator/ remediator/
COPY scripts/cloud-requirements.txt ./
# boto3 without its dateutil<3 pin (see the file's header); moto is only for tests but small.
RUN /opt/remediator/venv/bin/pip install . \
    && /opt/remediator/venv/bin/pip install --no-deps -r cloud-requirements.txt

FROM python:3.11-slim
# git: the policy loader records the commit of the git-sync checkout it reads.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*
# A numeric, non-root user, so that the kubelet can verify runAsNonRoot.
RUN groupadd --system --gid 10001 remediator \
    && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent \
        --shell /usr/sbin/nologin remediator
COPY --from=build /opt/remediator/venv /opt/remediator/venv
COPY migrations/ /opt/remediator/migrations/
COPY policies/ /opt/remediator/policies/
COPY runbooks/ /opt/remediator/runbooks/
ENV PATH=/opt/remediator/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    REMEDIATOR_MIGRATIONS_DIR=/opt/remediator/migrations \
    REMEDIATOR_POLICIES_DIR=/opt/remediator/policies \
    REMEDIATOR_RUNBOOKS_DIR=/opt/remediator/runbooks
WORKDIR /opt/remediator
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["remediator"]
CMD ["run", "--config", "/etc/remediator/config.yaml"]
