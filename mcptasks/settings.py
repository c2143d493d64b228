"""Settings for mcptasks: one module, read from environment variables.

With no variables set it boots the embedded default (SQLite under ``var/``, in-memory channel
layer, in-process worker). ``DATABASE_URL`` and ``REDIS_URL`` switch to PostgreSQL and Redis.
The parsing of variables (types, keys, URLs, databases) is in ``mcptasks.conf``; every
``MCPTASKS_*`` variable read here has a row in README.md's settings table
(``tests/core/test_settings_declared.py``).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from mcptasks.conf import (
    db_pooler,
    env_bool,
    env_int,
    env_json_object,
    env_list,
    env_str,
    parse_redis_url,
    postgres_database,
    secret,
    sqlite_database,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("MCPTASKS_VAR_DIR", BASE_DIR / "var"))


# ---------------------------------------------------------------- mode
DATABASE_URL = env_str("DATABASE_URL")
REDIS_URL = env_str("REDIS_URL")
PRODUCTION = bool(DATABASE_URL or REDIS_URL)
DEBUG = env_bool("DEBUG", default=not PRODUCTION)

SECRET_KEY = secret("SECRET_KEY", "secret_key", production=PRODUCTION, var_dir=VAR_DIR)
# Key for MRTR requestState (Fernet, AEAD); derived material lives in mcptasks.protocol.
REQUEST_STATE_KEY = secret(
    "MCPTASKS_REQUEST_STATE_KEY", "request_state_key", production=PRODUCTION, var_dir=VAR_DIR
)
AUDIT_SIGNING_KEY = secret(
    "MCPTASKS_AUDIT_SIGNING_KEY", "audit_signing_key", production=PRODUCTION, var_dir=VAR_DIR
)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "::1"])
# Browser origins accepted on /mcp besides loopback ones (PROTOCOL T2).
MCPTASKS_ALLOWED_ORIGINS = env_list("MCPTASKS_ALLOWED_ORIGINS", [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# ---------------------------------------------------------------- apps
INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and ReDoc as our own static files (the CSP: 'self')
    "django_htmx",
    "guardian",
    "axes",
    "channels",
    "mcptasks",
    "audit",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "mcptasks.errors.NotFoundPagesMiddleware",
    "mcptasks.limits.ThrottledMiddleware",
    # Last, as django-axes requires: turns a locked-out login into its 429 response.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "mcptasks.urls"
ASGI_APPLICATION = "mcptasks.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.csp",
            ],
        },
    },
]

AUTHENTICATION_BACKENDS = [
    "mcptasks.logins.LoginThrottleBackend",  # django-axes: first, so a lockout stops the login
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]
ANONYMOUS_USER_NAME = None  # guardian: no anonymous user row

# ---------------------------------------------------------------- database
# PostgreSQL from DATABASE_URL (DATABASE_POOL, _MIN, _MAX) or SQLite under VAR_DIR (SQLITE_PATH).
# MCPTASKS_DB_POOLER=pgbouncer: every connection (ORM, its pool, fast tasks/get) keeps nothing
# beyond a transaction, for PgBouncer in transaction mode (README "Behind PgBouncer").
MCPTASKS_DB_POOLER = db_pooler()
DATABASES = {
    "default": (
        postgres_database(DATABASE_URL, MCPTASKS_DB_POOLER)
        if DATABASE_URL
        else sqlite_database(VAR_DIR)
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# PostgreSQL role of web, worker and beat: `migrate` (run as the owner) grants it what it may do,
# which excludes UPDATE, DELETE and TRUNCATE of audit rows (mcptasks/dbroles.py).
MCPTASKS_DB_APP_ROLE = env_str("MCPTASKS_DB_APP_ROLE")

# ---------------------------------------------------------------- redis, celery, channels
if REDIS_URL:
    _redis_base, _redis_db = parse_redis_url("REDIS_URL", REDIS_URL)
    CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", f"{_redis_base}/{_redis_db}")
    CHANNEL_REDIS_URL = env_str("CHANNEL_REDIS_URL", f"{_redis_base}/{_redis_db + 1}")
    parse_redis_url("CELERY_BROKER_URL", CELERY_BROKER_URL)
    parse_redis_url("CHANNEL_REDIS_URL", CHANNEL_REDIS_URL)
    MCPTASKS_LIMITS_REDIS_URL = env_str(
        "MCPTASKS_LIMITS_REDIS_URL", f"{_redis_base}/{_redis_db + 2}"
    )
    parse_redis_url("MCPTASKS_LIMITS_REDIS_URL", MCPTASKS_LIMITS_REDIS_URL)
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # Longer than channels-redis's 5 s blocking receive, so an idle receive (a listen
            # hub, a dashboard socket) is not cut by redis-py's socket timeout.
            "CONFIG": {"hosts": [{"address": CHANNEL_REDIS_URL, "socket_timeout": 15}]},
        }
    }
    MCPTASKS_EMBEDDED_WORKER = False
else:
    CELERY_BROKER_URL = "memory://"
    CHANNEL_REDIS_URL = ""  # no Redis channel layer (mcptasks.health checks it only with Redis)
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    # Jobs run on the worker thread that `manage.py serve` starts (mcptasks.embedded).
    MCPTASKS_EMBEDDED_WORKER = True
    # Rate limits and quotas count in process memory (mcptasks.limits).
    MCPTASKS_LIMITS_REDIS_URL = ""

CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 3600)
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 3540)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_REJECT_ON_WORKER_LOST = False  # a lost worker's task is re-queued by the reaper
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600)}
CELERY_TASK_DEFAULT_RETRY_DELAY = 2
MCPTASKS_SWEEP_INTERVAL_S = float(env_str("MCPTASKS_SWEEP_INTERVAL_S", "1.0"))
CELERY_BEAT_SCHEDULE = {
    "sweep": {
        "task": "mcptasks.sweep",
        "schedule": MCPTASKS_SWEEP_INTERVAL_S,
        "options": {"expires": 10},
    },
    "audit-retention": {"task": "mcptasks.purge_audit_due", "schedule": 86_400.0},
}
# Signed audit digests (docs/audit.md, "Digests"): how often each chain's head is anchored.
MCPTASKS_AUDIT_DIGEST_INTERVAL_S = float(env_str("MCPTASKS_AUDIT_DIGEST_INTERVAL_S", "3600"))
CELERY_BEAT_SCHEDULE["audit-digests"] = {
    "task": "mcptasks.write_audit_digests",
    "schedule": MCPTASKS_AUDIT_DIGEST_INTERVAL_S,
}
# `celery -A mcptasks beat` keeps its schedule state here, never in the working directory.
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# ---------------------------------------------------------------- auth, i18n, static
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"

# Login throttling (django-axes; mcptasks/logins.py): a username from one client address is
# locked out for MCPTASKS_LOGIN_LOCKOUT_S after MCPTASKS_LOGIN_FAILURE_LIMIT failures.
MCPTASKS_LOGIN_FAILURE_LIMIT = env_int("MCPTASKS_LOGIN_FAILURE_LIMIT", 5)
MCPTASKS_LOGIN_LOCKOUT_S = env_int("MCPTASKS_LOGIN_LOCKOUT_S", 900)
AXES_FAILURE_LIMIT = MCPTASKS_LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(seconds=MCPTASKS_LOGIN_LOCKOUT_S)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "mcptasks.client_ip.client_ip"
AXES_DISABLE_ACCESS_LOG = True  # logins are audited (audit/auth_events.py), not logged twice
AXES_HTTP_RESPONSE_CODE = 429
AXES_VERBOSE = False
# Failed logins are audited, repeats aggregated: per (username or, for unknown usernames, the
# system chain) and client address, the 1st, 10th, 100th… failure within the window is
# recorded with its count; the system chain takes at most ..._SYSTEM_MAX of them per window.
MCPTASKS_LOGIN_FAILED_AUDIT_WINDOW_S = env_int("MCPTASKS_LOGIN_FAILED_AUDIT_WINDOW_S", 3600)
MCPTASKS_LOGIN_FAILED_AUDIT_SYSTEM_MAX = env_int("MCPTASKS_LOGIN_FAILED_AUDIT_SYSTEM_MAX", 100)
# Proxies (addresses or networks, comma-separated) whose X-Forwarded-For is believed for the
# client address (audit "ip", login throttling); default none: REMOTE_ADDR only.
MCPTASKS_TRUSTED_PROXIES = env_list("MCPTASKS_TRUSTED_PROXIES", [])

# ---------------------------------------------------------------- REST API
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "mcptasks.restkit.auth.BearerTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "mcptasks.restkit.errors.problem_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "mcptasks REST API",
    "DESCRIPTION": "Tenants review their task history, operators act, compliance exports audit.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # A delivery's state (issue 24) is another choice set named "state" than a task's: each
    # keeps a name of its own (the task's the one it had).
    "ENUM_NAME_OVERRIDES": {
        "StateEnum": "mcptasks.models.TaskState",
        "DeliveryStateEnum": "mcptasks.outbox.models.DeliveryState",
    },
}

# ---------------------------------------------------------------- mcptasks
MCPTASKS_VERSION = "0.1.0"
MCPTASKS_COMMIT = env_str("MCPTASKS_COMMIT", "dev")
MCPTASKS_SERVER_BUILD = f"{MCPTASKS_VERSION}+{MCPTASKS_COMMIT}"
MCPTASKS_TOOL_PACKS = env_list("MCPTASKS_TOOL_PACKS", ["mcptasks.tools.demo"])
MCPTASKS_CONFORMANCE_MODE = env_bool("MCPTASKS_CONFORMANCE_MODE", default=False)
MCPTASKS_STRICT_MCP_NAME = env_bool("MCPTASKS_STRICT_MCP_NAME", default=False)
MCPTASKS_MAX_REQUEST_BYTES = env_int("MCPTASKS_MAX_REQUEST_BYTES", 1_048_576)
MCPTASKS_DEFAULT_TTL_MS = env_int("MCPTASKS_DEFAULT_TTL_MS", 3_600_000)
MCPTASKS_DEFAULT_POLL_INTERVAL_MS = env_int("MCPTASKS_DEFAULT_POLL_INTERVAL_MS", 1000)
MCPTASKS_TERMINAL_GRACE_S = env_int("MCPTASKS_TERMINAL_GRACE_S", 3600)
# PostgreSQL: the TTL purge drops a whole day's partition of tasks once every task of it is due
# (mcptasks/task_partitions.py); off, every task is purged row by row at its TTL plus the grace.
MCPTASKS_TASK_PARTITION_PURGE = env_bool("MCPTASKS_TASK_PARTITION_PURGE", default=True)
MCPTASKS_LEASE_S = env_int("MCPTASKS_LEASE_S", 30)
# A requested cancel not taken effect after this long is listed as stuck for operators.
MCPTASKS_STUCK_CANCEL_S = env_int("MCPTASKS_STUCK_CANCEL_S", 60)
MCPTASKS_MAX_ATTEMPTS = env_int("MCPTASKS_MAX_ATTEMPTS", 5)
# How long a task tool that asks before its task exists may run in the web request.
MCPTASKS_PRE_TASK_LIMIT_S = float(env_str("MCPTASKS_PRE_TASK_LIMIT_S", "2"))
# Transient database errors: how often a read (or a repeat-safe write) is retried on a fresh
# connection before the request fails (mcptasks/db_retry.py).
MCPTASKS_DB_RETRIES = env_int("MCPTASKS_DB_RETRIES", 2)
# One attempt of a tool that declares no max_run_s is stopped after this long (0: no limit).
MCPTASKS_MAX_RUN_S = env_int("MCPTASKS_MAX_RUN_S", 21_600)
# "not applied" is refused for an unknown effect until the lease of the attempt that left it
# ran out this long ago: until then that attempt may still be alive and call downstream.
MCPTASKS_RECONCILE_MARGIN_S = env_int("MCPTASKS_RECONCILE_MARGIN_S", 60)
# Timers due sooner than this are also woken by a delayed job (precise); later ones only by the
# due-timer sweep, so no broker message waits for hours.
MCPTASKS_TIMER_ETA_MAX_S = env_int("MCPTASKS_TIMER_ETA_MAX_S", 60)
MCPTASKS_MAX_RESULT_BYTES = env_int("MCPTASKS_MAX_RESULT_BYTES", 1_048_576)
# ---- limits (README "Limits" lists each with the error it produces)
MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL = env_int("MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL", 100)
MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT = env_int("MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT", 1000)
# Fair share (mcptasks/fairshare.py): running tasks at once; 0 = no cap. A tenant's own fields
# (Django admin) override them. Keep them below the workers' total concurrency.
MCPTASKS_MAX_RUNNING_TASKS_PER_TENANT = env_int("MCPTASKS_MAX_RUNNING_TASKS_PER_TENANT", 8)
MCPTASKS_MAX_RUNNING_TASKS_PER_PRINCIPAL = env_int("MCPTASKS_MAX_RUNNING_TASKS_PER_PRINCIPAL", 4)
MCPTASKS_MAX_INPUT_WAIT_S = env_int("MCPTASKS_MAX_INPUT_WAIT_S", 86_400)
MCPTASKS_LEASE_RENEW_S = env_int("MCPTASKS_LEASE_RENEW_S", 10)
MCPTASKS_POLL_BURST = env_int("MCPTASKS_POLL_BURST", 60)
# Poll tokens a web process takes from a shared (Redis) bucket at once and spends without a
# round trip (mcptasks.limits.Stock); 1: one round trip per poll.
MCPTASKS_POLL_LEASE = env_int("MCPTASKS_POLL_LEASE", 16)
MCPTASKS_UNKNOWN_TASK_BURST = env_int("MCPTASKS_UNKNOWN_TASK_BURST", 30)
MCPTASKS_UNKNOWN_TASK_RATE = float(env_str("MCPTASKS_UNKNOWN_TASK_RATE", "0.5"))
MCPTASKS_IDEMPOTENCY_WINDOW_S = env_int("MCPTASKS_IDEMPOTENCY_WINDOW_S", 86_400)
MCPTASKS_AUDIT_MAX_DATA_BYTES = env_int("MCPTASKS_AUDIT_MAX_DATA_BYTES", 16_384)
# Audit events sealed after commit, in batches (audit/seal.py): the most an event waits, in ms,
# before a sealer links it into its chain; 0 seals it inside the writing transaction (the SQLite
# default: one writer at a time anyway).
MCPTASKS_AUDIT_SEAL_DELAY_MS = env_int("MCPTASKS_AUDIT_SEAL_DELAY_MS", 100 if DATABASE_URL else 0)
MCPTASKS_TOKEN_LAST_USED_INTERVAL_S = 60
# tasks/get of a token's owner is answered on the event loop with one query on an async pool of
# at most this many connections per web process (PostgreSQL; mcptasks/mcp/fast_get.py), opened
# as concurrent polls need them and closed after 10 idle minutes. With 4, 32 concurrent polls
# queued for a connection and a poll cost a fifth more CPU (bench/PROFILE-23.md).
MCPTASKS_FAST_TASKS_GET = env_bool("MCPTASKS_FAST_TASKS_GET", default=True)
MCPTASKS_FAST_TASKS_GET_POOL_MAX = env_int("MCPTASKS_FAST_TASKS_GET_POOL_MAX", 16)
# Server-side prepared statement for it; off by default behind a pooler (PgBouncer keeps them
# in transaction mode only from 1.21, with max_prepared_statements set).
MCPTASKS_FAST_TASKS_GET_PREPARE = env_bool(
    "MCPTASKS_FAST_TASKS_GET_PREPARE", default=not MCPTASKS_DB_POOLER
)
MCPTASKS_STREAM_KEEPALIVE_S = float(env_str("MCPTASKS_STREAM_KEEPALIVE_S", "15"))
# Streams re-read unfinished tasks this often: the channel layer delivers at most once.
MCPTASKS_STREAM_CATCH_UP_S = float(env_str("MCPTASKS_STREAM_CATCH_UP_S", "5"))
# Open listen streams and dashboard sockets re-check their principal's token, user and
# memberships this often, and end when access was taken away (README "Security").
MCPTASKS_STREAM_ACCESS_CHECK_S = float(env_str("MCPTASKS_STREAM_ACCESS_CHECK_S", "2"))
# A listen stream that sent no notification for this long is ended (0: never).
MCPTASKS_STREAM_IDLE_TIMEOUT_S = float(env_str("MCPTASKS_STREAM_IDLE_TIMEOUT_S", "3600"))
# Open subscriptions/listen streams one principal (token or JWT) may hold per web process.
MCPTASKS_MAX_LISTEN_STREAMS_PER_PRINCIPAL = env_int(
    "MCPTASKS_MAX_LISTEN_STREAMS_PER_PRINCIPAL", 100
)

# ---------------------------------------------------------------- destinations: e-mail, files
# Django's mail backend sends the e-mail destinations' messages: the console on the embedded
# default, SMTP (EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS)
# in production. JSONL file destinations write under MCPTASKS_SINKS_DIR (docs/destinations.md).
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if PRODUCTION
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS")
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "mcptasks@localhost")
MCPTASKS_SINKS_DIR = Path(env_str("MCPTASKS_SINKS_DIR") or VAR_DIR / "sinks")
# The CA bundles syslog and Splunk HEC destinations may name (their ca_bundle is relative to it).
MCPTASKS_SINKS_CA_DIR = Path(env_str("MCPTASKS_SINKS_CA_DIR") or VAR_DIR / "sinks-ca")

# ---------------------------------------------------------------- logging
# structlog renders every stdlib log record: JSON in production, readable in development,
# always with request id / tenant / principal / task id from context and through the redactor.
LOG_FORMAT = env_str("LOG_FORMAT", "json" if PRODUCTION else "console")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"structured": {"()": "mcptasks.logging.formatter", "fmt": LOG_FORMAT}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "structured"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        "axes": {"level": "WARNING"},  # its per-login INFO lines repeat what the audit records
        # httpx logs every request's URL at INFO; a destination's URL may carry a secret (a
        # Slack webhook's path is one), and the delivery log records every send anyway.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}

# ---------------------------------------------------------------- tracing
# One OpenTelemetry trace per task (mcptasks/tracing.py, README "Tracing"): on when OTLP export
# is configured by the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT or _TRACES_ENDPOINT;
# OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off). Off: no SDK, no spans.
MCPTASKS_TRACING = env_bool(
    "MCPTASKS_TRACING",
    default=bool(
        env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env_str("OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    and env_str("OTEL_SDK_DISABLED").lower() != "true"
    and env_str("OTEL_TRACES_EXPORTER", "otlp").lower() != "none",
)

# ---------------------------------------------------------------- hardening
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
if not DEBUG:
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    # TLS ends at the proxy in front of the web processes.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]

from django.utils.csp import CSP  # noqa: E402

SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
    "base-uri": [CSP.SELF],
}

# ---------------------------------------------------------------- OAuth resource server
# The canonical URI of this server (RFC 8707): the audience external access tokens must carry.
MCPTASKS_PUBLIC_URL = env_str("MCPTASKS_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")
MCPTASKS_AUTHORIZATION_SERVERS = env_list(
    "MCPTASKS_AUTHORIZATION_SERVERS", [env_str("MCPTASKS_JWT_ISSUER") or MCPTASKS_PUBLIC_URL]
)
MCPTASKS_JWT_ISSUER = env_str("MCPTASKS_JWT_ISSUER")
MCPTASKS_JWT_AUDIENCE = env_str("MCPTASKS_JWT_AUDIENCE", f"{MCPTASKS_PUBLIC_URL}/mcp")
MCPTASKS_JWT_JWKS_URL = env_str("MCPTASKS_JWT_JWKS_URL")
MCPTASKS_JWT_JWKS_FILE = env_str("MCPTASKS_JWT_JWKS_FILE")
MCPTASKS_JWT_ALGORITHMS = env_list("MCPTASKS_JWT_ALGORITHMS", ["RS256", "ES256", "EdDSA"])
MCPTASKS_JWT_USER_CLAIM = env_str("MCPTASKS_JWT_USER_CLAIM", "sub")
MCPTASKS_JWT_TENANT_CLAIM = env_str("MCPTASKS_JWT_TENANT_CLAIM", "tenant")

# ---------------------------------------------------------------- metrics
PROMETHEUS_MULTIPROC_DIR = env_str("PROMETHEUS_MULTIPROC_DIR")
# How old /metrics' counts of ended tasks may be, in seconds: counting them reads most of the
# task table, so each web process does it at most this often (the active states' counts are
# read at every scrape). 0: at every scrape.
MCPTASKS_METRICS_ENDED_COUNT_S = env_int("MCPTASKS_METRICS_ENDED_COUNT_S", 300)

# ---------------------------------------------------------------- audit
# Public keys (besides this server's own) whose signed export manifests verify_export trusts:
# the keys of rotated-out signing keys (docs/audit.md).
MCPTASKS_AUDIT_TRUSTED_PUBLIC_KEYS = env_list("MCPTASKS_AUDIT_TRUSTED_PUBLIC_KEYS", [])
# The key digests are signed with (Ed25519 derived like the export key); default: the audit
# signing key. Where digest files go: a Django storage class and its options (JSON); default a
# directory under the var dir. Production: any storage, e.g. django-storages' S3 with object lock.
MCPTASKS_AUDIT_DIGEST_SIGNING_KEY = (
    env_str("MCPTASKS_AUDIT_DIGEST_SIGNING_KEY") or AUDIT_SIGNING_KEY
)
MCPTASKS_AUDIT_DIGEST_STORAGE = env_str(
    "MCPTASKS_AUDIT_DIGEST_STORAGE", "django.core.files.storage.FileSystemStorage"
)
MCPTASKS_AUDIT_DIGEST_STORAGE_OPTIONS = env_json_object(
    "MCPTASKS_AUDIT_DIGEST_STORAGE_OPTIONS", {"location": str(VAR_DIR / "audit-digests")}
)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "audit_digests": {
        "BACKEND": MCPTASKS_AUDIT_DIGEST_STORAGE,
        "OPTIONS": MCPTASKS_AUDIT_DIGEST_STORAGE_OPTIONS,
    },
}
# The dashboard's "verify an export" upload: its size, and what its zip may unpack to.
MCPTASKS_AUDIT_VERIFY_MAX_UPLOAD_BYTES = env_int(
    "MCPTASKS_AUDIT_VERIFY_MAX_UPLOAD_BYTES", 33_554_432
)
MCPTASKS_AUDIT_VERIFY_MAX_UNCOMPRESSED_BYTES = env_int(
    "MCPTASKS_AUDIT_VERIFY_MAX_UNCOMPRESSED_BYTES", 268_435_456
)

# ---------------------------------------------------------------- outbox (docs/webhooks.md)
# Destinations' secrets are Fernet-encrypted with a key derived from this (default SECRET_KEY).
MCPTASKS_DESTINATION_SECRET_KEY = env_str("MCPTASKS_DESTINATION_SECRET_KEY") or SECRET_KEY
# Retries: exponential backoff from BASE to at most MAX seconds, with jitter; a delivery still
# failing DEAD_AFTER seconds after it was written is dead-lettered (redeliver from the dashboard
# or the API).
MCPTASKS_OUTBOX_BACKOFF_BASE_S = float(env_str("MCPTASKS_OUTBOX_BACKOFF_BASE_S", "2"))
MCPTASKS_OUTBOX_BACKOFF_MAX_S = float(env_str("MCPTASKS_OUTBOX_BACKOFF_MAX_S", "600"))
MCPTASKS_OUTBOX_DEAD_AFTER_S = float(env_str("MCPTASKS_OUTBOX_DEAD_AFTER_S", "86400"))
# A worker's claim on a delivery; a worker killed mid-send loses it after this long.
MCPTASKS_OUTBOX_LEASE_S = env_int("MCPTASKS_OUTBOX_LEASE_S", 60)
MCPTASKS_OUTBOX_SEND_TIMEOUT_S = float(env_str("MCPTASKS_OUTBOX_SEND_TIMEOUT_S", "10"))
# Audit events per delivery to a sink that batches (at most its own max_batch).
MCPTASKS_OUTBOX_AUDIT_BATCH = env_int("MCPTASKS_OUTBOX_AUDIT_BATCH", 100)
# How long a process trusts what it read of a tenant's subscriptions (other processes see a
# change of destinations within this long; the process making it at once).
MCPTASKS_OUTBOX_SUBSCRIPTION_CACHE_S = float(env_str("MCPTASKS_OUTBOX_SUBSCRIPTION_CACHE_S", "2"))
# Webhooks: plain http:// only to loopback hosts unless this is set.
MCPTASKS_WEBHOOK_ALLOW_HTTP = env_bool("MCPTASKS_WEBHOOK_ALLOW_HTTP", default=False)
