# One image for web, worker and beat. Locked dependencies, non-root, static files collected.
FROM python:3.12-slim-bookworm AS base

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    UV_PROJECT_ENVIRONMENT=/opt/venv UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy \
    PATH=/opt/venv/bin:$PATH

RUN pip install --no-cache-dir uv==0.13.9 \
 && groupadd --system mcptasks && useradd --system --gid mcptasks --home /app mcptasks

WORKDIR /app
COPY pyproject.toml uv.lock ./
RUN uv sync --locked --no-dev --no-install-project

COPY --chown=mcptasks:mcptasks . .
# Static files are served by the web process (whitenoise) from MCPTASKS_VAR_DIR/static, so they
# are collected into the same MCPTASKS_VAR_DIR the containers run with. collectstatic needs
# settings but no services: build with throwaway keys. check --deploy fails the build if any
# static file is missing (mcptasks.E001); its SECRET_KEY warning is about the throwaway key.
ENV MCPTASKS_VAR_DIR=/app/var
RUN DATABASE_URL=postgres://build@localhost/build REDIS_URL=redis://localhost:6379/0 \
    SECRET_KEY=build-only MCPTASKS_REQUEST_STATE_KEY=build-only \
    MCPTASKS_AUDIT_SIGNING_KEY=build-only \
    sh -c 'python manage.py collectstatic --no-input -v0 && python manage.py check --deploy' \
 && mkdir -p /app/var /tmp/prometheus && chown -R mcptasks:mcptasks /app/var /tmp/prometheus

USER mcptasks
ENV PROMETHEUS_MULTIPROC_DIR=/tmp/prometheus
EXPOSE 8000
CMD ["python", "manage.py", "serve", "--host", "0.0.0.0", "--port", "8000"]
