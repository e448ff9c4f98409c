"""GPU Portal settings, all read from the environment (see README "Configuration").

``PORTAL_ENV=production`` switches on the deployment checklist (secure cookies,
HSTS, SSL redirect, no DEBUG, SECRET_KEY required); the defaults suit a laptop.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import dj_database_url
from celery.schedules import crontab

from portal.env import ConfigurationError, env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

PORTAL_ENV = (env_str("PORTAL_ENV", "development") or "development").lower()
if PORTAL_ENV not in {"development", "production"}:
    raise ConfigurationError(f"PORTAL_ENV={PORTAL_ENV!r}: use development or production")
PRODUCTION = PORTAL_ENV == "production"

_DEV_SECRET = "django-insecure-local-development-only-key-do-not-use-in-production"  # noqa: S105 - dev-only, refused in production
SECRET_KEY = env_str("SECRET_KEY") or ("" if PRODUCTION else _DEV_SECRET)
if PRODUCTION and (not SECRET_KEY or SECRET_KEY == _DEV_SECRET or len(SECRET_KEY) < 50):
    raise ConfigurationError(
        "SECRET_KEY (or SECRET_KEY_FILE) must be set to a random string of 50+ characters "
        "in production: python -c 'import secrets; print(secrets.token_urlsafe(64))'"
    )

DEBUG = env_bool("DEBUG", default=not PRODUCTION)
if PRODUCTION and DEBUG:
    raise ConfigurationError("DEBUG must be false when PORTAL_ENV=production")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [] if PRODUCTION else ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "axes",
    # In layer order (docs/architecture.md): each app imports only the ones above it.
    "cluster",
    "teams",
    "notifications",
    "jobs",
    "workspaces",
    "monitoring",
    "gpu_stack",
    "portal",
]

MIDDLEWARE = [
    # First: the liveness and readiness probes (pod IP as Host, plain HTTP).
    "portal.middleware.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "portal.middleware.SecurityHeadersMiddleware",
    "portal.middleware.NotFoundMiddleware",
    # Last: it turns a lockout into the lockout response.
    "axes.middleware.AxesMiddleware",
]

AUTHENTICATION_BACKENDS = [
    # Login throttling: refuses a locked-out username/IP before checking the password.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = env_float("LOGIN_COOLOFF_MINUTES", 15.0) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_IPWARE_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0)

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

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
            ],
        },
    },
]

# PostgreSQL is the database of record; SQLite is accepted only for the local demo
# (``make run`` falls back to it when no PostgreSQL server answers).
DATABASE_URL = env_str("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpu_portal")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL or "", conn_max_age=60)}
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if PRODUCTION and DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ConfigurationError("DATABASE_URL must point at PostgreSQL in production")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "jobs:list"
LOGOUT_REDIRECT_URL = "login"

# --- Single sign-on (OpenID Connect) ---------------------------------------------------
# Empty issuer: no single sign-on. The client secret can come from OIDC_CLIENT_SECRET_FILE.
OIDC_ISSUER = (env_str("OIDC_ISSUER", "") or "").rstrip("/")
OIDC_CLIENT_ID = env_str("OIDC_CLIENT_ID", "") or ""
OIDC_CLIENT_SECRET = env_str("OIDC_CLIENT_SECRET", "") or ""
OIDC_SCOPES = env_list("OIDC_SCOPES", ["openid", "email", "profile", "groups"])
# The ID-token claim that lists the user's groups (Keycloak and Dex: groups; Entra: groups).
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", "groups") or "groups"
OIDC_DISPLAY_NAME = env_str("OIDC_DISPLAY_NAME", "single sign-on") or "single sign-on"
# Whom someone whose groups map to no team should ask (shown on that page).
OIDC_SUPPORT_CONTACT = env_str("OIDC_SUPPORT_CONTACT", "your platform team") or ""
# Passwords of local accounts (bootstrap admins); false: single sign-on only.
LOCAL_LOGIN_ENABLED = env_bool("LOCAL_LOGIN_ENABLED", True)
if OIDC_ISSUER and not (OIDC_CLIENT_ID and OIDC_CLIENT_SECRET):
    raise ConfigurationError(
        "OIDC_ISSUER is set: set OIDC_CLIENT_ID and OIDC_CLIENT_SECRET (or "
        "OIDC_CLIENT_SECRET_FILE) to the client registered at the provider."
    )
if "openid" not in OIDC_SCOPES:
    raise ConfigurationError(f"OIDC_SCOPES must include openid (got {','.join(OIDC_SCOPES)}).")

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC") or "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "var" / "static")) or "")
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # plotly.js comes from the installed plotly package, never from a CDN.
    "portal.staticfinders.PlotlyFinder",
]
# Outside production, WhiteNoise serves straight from the finders (no collectstatic needed).
WHITENOISE_USE_FINDERS = not PRODUCTION
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}

# --- Celery (Redis broker) -------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0") or ""
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 60)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 90)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Redis redelivers an unacked task after this many seconds; it must exceed the hard limit.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 600)}
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# Who admits jobs against the teams' quotas: the portal's own engine ("portal"), or Kueue
# where the cluster runs it ("kueue"; docs/queueing.md). With Kueue, the portal writes
# Kueue's configuration from its teams unless KUEUE_MANAGED is false (the platform team
# owns it; each team is mapped to a LocalQueue in the admin).
QUEUEING = (env_str("QUEUEING", "portal") or "portal").lower()
if QUEUEING not in ("portal", "kueue"):
    raise ConfigurationError(f"QUEUEING must be 'portal' or 'kueue', not {QUEUEING!r}.")
KUEUE_MANAGED = env_bool("KUEUE_MANAGED", True)
# The periodic reconcile: the safety net behind the watch tracker (manage.py track_cluster),
# catching what a watch missed and re-queuing lost work. Without a tracker, set it to ~10.
RECONCILE_INTERVAL_SECONDS = env_float("RECONCILE_INTERVAL_SECONDS", 120.0)
# The watch tracker (manage.py track_cluster): its leader-election Lease, and how long a
# leader that stopped renewing keeps it before another tracker takes over.
TRACKER_LEASE_NAMESPACE = env_str("TRACKER_LEASE_NAMESPACE", "default")
TRACKER_LEASE_NAME = env_str("TRACKER_LEASE_NAME", "gpu-portal-tracker")
TRACKER_LEASE_SECONDS = env_float("TRACKER_LEASE_SECONDS", 15.0)
# A queued job whose task should have run by then is re-queued (its task was lost).
STALE_QUEUE_SECONDS = env_float("STALE_QUEUE_SECONDS", 60.0)
# An applied job whose objects are missing for longer than this is marked Lost.
LOST_GRACE_SECONDS = env_float("LOST_GRACE_SECONDS", 30.0)
# How often the idle-GPU policy looks at the running jobs (report, warn, stop).
IDLE_POLICY_INTERVAL_SECONDS = env_float("IDLE_POLICY_INTERVAL_SECONDS", 60.0)
# How often running workspaces are checked against their team's idle rule and lifetime.
WORKSPACE_IDLE_INTERVAL_SECONDS = env_float("WORKSPACE_IDLE_INTERVAL_SECONDS", 60.0)
# How often failed jobs are checked for GPU failures (XID errors), and how far back.
GPU_FAILURE_CHECK_INTERVAL_SECONDS = env_float("GPU_FAILURE_CHECK_INTERVAL_SECONDS", 30.0)
GPU_FAILURE_WINDOW_MINUTES = env_float("GPU_FAILURE_WINDOW_MINUTES", 15.0)
# A training job that failed on a GPU runs again (away from that node) this many times.
GPU_FAILURE_RETRIES = env_int("GPU_FAILURE_RETRIES", 3)
# Cordon a node once its GPUs failed jobs this many times within the window (0: never).
GPU_FAILURE_CORDON_AFTER = env_int("GPU_FAILURE_CORDON_AFTER", 0)
# Tell the platform admins once a node's GPUs failed jobs this many times in that window.
GPU_FAILURE_REPORT_AFTER = env_int("GPU_FAILURE_REPORT_AFTER", 2)
GPU_FAILURE_CORDON_WINDOW_HOURS = env_float("GPU_FAILURE_CORDON_WINDOW_HOURS", 24.0)
# A training pod leaves a node that stopped responding after this many seconds (the taint
# manager evicts it; the job then runs again elsewhere). Negative: the API server's 300 s.
NODE_FAILURE_TOLERATION_SECONDS = env_int("NODE_FAILURE_TOLERATION_SECONDS", 60)
# How often the GPU-hour rollup updates today (and catches up on past days).
ACCOUNTING_INTERVAL_SECONDS = env_float("ACCOUNTING_INTERVAL_SECONDS", 900.0)
# Training launchers (docs/jobs.md, "Launchers"): the ones the admin enables, in the order
# the form offers them (only those the cluster serves are offered), and the default.
TRAINING_LAUNCHERS = env_list("TRAINING_LAUNCHERS", ["job", "pytorchjob", "trainjob"])
DEFAULT_TRAINING_LAUNCHER = env_str("DEFAULT_TRAINING_LAUNCHER", "job") or "job"
_LAUNCHERS = ("job", "pytorchjob", "trainjob")
if unknown := [n for n in [*TRAINING_LAUNCHERS, DEFAULT_TRAINING_LAUNCHER] if n not in _LAUNCHERS]:
    raise ConfigurationError(
        f"TRAINING_LAUNCHERS / DEFAULT_TRAINING_LAUNCHER: unknown {', '.join(unknown)}; use "
        f"{', '.join(_LAUNCHERS)}"
    )
# The ClusterTrainingRuntime the portal's TrainJobs run on (launcher trainjob; written by the
# team sync unless a runtime of that name is someone else's): offered only where the
# cluster serves Trainer's API and has this runtime.
TRAINJOB_RUNTIME = env_str("TRAINJOB_RUNTIME", "gpu-portal-torch") or "gpu-portal-torch"
# Training progress and time to finish, from the running jobs' rank-0 logs (docs/jobs.md):
# how often beat reads them, and at most how many logs per pass.
PROGRESS_INTERVAL_SECONDS = env_float("PROGRESS_INTERVAL_SECONDS", 30.0)
PROGRESS_BATCH = env_int("PROGRESS_BATCH", 500)
CELERY_BEAT_SCHEDULE = {
    "reconcile": {"task": "jobs.tasks.reconcile_task", "schedule": RECONCILE_INTERVAL_SECONDS},
    "progress": {"task": "jobs.tasks.progress_refresh_task", "schedule": PROGRESS_INTERVAL_SECONDS},
    "catalog-refresh": {"task": "cluster.tasks.catalog_refresh_task", "schedule": 300.0},
    "teams-sync": {"task": "teams.tasks.teams_sync_task", "schedule": 300.0},
    "waiting-check": {"task": "jobs.tasks.jobs_waiting_check_task", "schedule": 60.0},
    "spill-over": {"task": "jobs.tasks.spill_over_task", "schedule": 60.0},
    "gpu-changes": {
        "task": "jobs.tasks.gpu_changes_resume_task",
        "schedule": 60.0,
    },  # gpu_stack.tasks
    "stuck-deliveries": {"task": "notifications.tasks.deliveries_stuck_task", "schedule": 60.0},
    "idle-policy": {
        "task": "monitoring.tasks.idle_policy_task",
        "schedule": IDLE_POLICY_INTERVAL_SECONDS,
    },
    "workspace-idle": {
        "task": "monitoring.tasks.workspace_idle_task",
        "schedule": WORKSPACE_IDLE_INTERVAL_SECONDS,
    },
    "gpu-failures": {
        "task": "monitoring.tasks.gpu_failures_task",
        "schedule": GPU_FAILURE_CHECK_INTERVAL_SECONDS,
    },
    "usage-rollup": {
        "task": "monitoring.tasks.usage_rollup_task",
        "schedule": ACCOUNTING_INTERVAL_SECONDS,
    },
    # Daily; it sends last month's summary to the leads once that month is rolled up.
    "monthly-summary": {
        "task": "monitoring.tasks.monthly_summary_task",
        "schedule": crontab(hour=7, minute=0),
    },
}

# /readyz asks the database, Redis, the cluster and Prometheus, each within this (seconds).
READY_CHECK_TIMEOUT = env_float("READY_CHECK_TIMEOUT", 2.0)

# --- Kubernetes ------------------------------------------------------------------------
KUBECONFIG = env_str("KUBECONFIG", "") or ""
KUBE_CONTEXT = env_str("KUBE_CONTEXT", "") or ""
KUBE_IN_CLUSTER = env_bool("KUBE_IN_CLUSTER", False)
# The name of the cluster these three settings reach: the first of the portal's clusters
# (cluster.models.Cluster), made from them by a migration; more are added in the admin.
CLUSTER_NAME = env_str("CLUSTER_NAME", "default") or "default"
KUBE_REQUEST_TIMEOUT = env_float("KUBE_REQUEST_TIMEOUT", 10.0)
# Team isolation: a NetworkPolicy in every team namespace lets in only the namespace itself
# and these namespaces (Prometheus scraping, the ingress controller). Turn it off on clusters
# whose network plugin does not enforce NetworkPolicy (the portal then removes its own).
TEAM_NETWORK_POLICY = env_bool("TEAM_NETWORK_POLICY", True)
TEAM_NETWORK_POLICY_INGRESS_NAMESPACES = env_list(
    "TEAM_NETWORK_POLICY_INGRESS_NAMESPACES", ["monitoring", "ingress-nginx"]
)
# The workspace proxy (workspaces/proxy/): where it sends every path but /workspaces/<id>/ when
# it stands in front of the portal (make run, compose); empty: it serves workspaces only
# (the Helm chart's ingress routes /workspaces/ to it and the rest to the web process).
WORKSPACE_PROXY_UPSTREAM = (env_str("WORKSPACE_PROXY_UPSTREAM", "") or "").rstrip("/")
# The namespace the portal (its workspace proxy) runs in: the only one whose pods may reach
# workspace pods (the Helm chart sets it to the release's namespace).
PORTAL_NAMESPACE = env_str("PORTAL_NAMESPACE", "gpu-portal") or "gpu-portal"
# Empty: egress open. Otherwise DNS plus these CIDRs only (e.g. 10.0.0.0/8,0.0.0.0/0 …).
TEAM_NETWORK_POLICY_EGRESS_CIDRS = env_list("TEAM_NETWORK_POLICY_EGRESS_CIDRS", [])
for _cidr in TEAM_NETWORK_POLICY_EGRESS_CIDRS:
    try:
        ipaddress.ip_network(_cidr, strict=True)
    except ValueError as _exc:
        raise ConfigurationError(
            f"TEAM_NETWORK_POLICY_EGRESS_CIDRS: {_cidr!r} is not a network in CIDR notation "
            f"({_exc}); write it like 10.0.0.0/8."
        ) from _exc
# The schema version every generated manifest is validated against (kubernetes-validate).
KUBERNETES_VERSION = env_str("KUBERNETES_VERSION", "1.33") or "1.33"
# The submit form's "will it fit?" reuses a cluster snapshot this many seconds old at most.
FIT_SNAPSHOT_TTL_SECONDS = env_float("FIT_SNAPSHOT_TTL_SECONDS", 5.0)

# --- Prometheus ------------------------------------------------------------------------
PROMETHEUS_URL = env_str("PROMETHEUS_URL", "http://127.0.0.1:9090") or ""
PROMETHEUS_TIMEOUT = env_float("PROMETHEUS_TIMEOUT", 5.0)
# True when that Prometheus evaluates the shipped recording rules (deploy/prometheus/
# gpu-alerts.yml): the cluster and team lines then read the recorded series.
PROMETHEUS_RECORDING_RULES = env_bool("PROMETHEUS_RECORDING_RULES", False)
# A running job is "idle" when all its GPUs stayed under the threshold for the window.
IDLE_GPU_THRESHOLD_PERCENT = env_float("IDLE_GPU_THRESHOLD_PERCENT", 5.0)
IDLE_GPU_WINDOW_MINUTES = env_float("IDLE_GPU_WINDOW_MINUTES", 30.0)
# The GPU stack page's advice: a MIG-capable node's whole GPUs count as idle supply when all of
# them stayed under IDLE_GPU_THRESHOLD_PERCENT for this long (docs/gpu-operator.md).
GPU_ADVICE_WINDOW_MINUTES = env_float("GPU_ADVICE_WINDOW_MINUTES", 180.0)
# Bearer token Prometheus must send to scrape /metrics; empty leaves /metrics open (it is
# meant for the cluster-internal network, like /healthz).
METRICS_TOKEN = env_str("METRICS_TOKEN", "") or ""

# --- GPU-hour accounting ---------------------------------------------------------------
# The rollup integrates utilisation at this step (seconds).
ACCOUNTING_STEP_SECONDS = env_int("ACCOUNTING_STEP_SECONDS", 60)
if ACCOUNTING_STEP_SECONDS < 1 or 900 % ACCOUNTING_STEP_SECONDS:
    raise ConfigurationError(
        f"ACCOUNTING_STEP_SECONDS must divide 900 (60, 300 or 900, say), so every day starts "
        f"on a step (got {ACCOUNTING_STEP_SECONDS})."
    )
# Past days the rollup re-does while incomplete (keep within Prometheus's retention).
ACCOUNTING_BACKFILL_DAYS = env_int("ACCOUNTING_BACKFILL_DAYS", 35)
# Past days one periodic run rolls up at most (a long backfill is spread over runs).
ACCOUNTING_DAYS_PER_RUN = env_int("ACCOUNTING_DAYS_PER_RUN", 7)
# A day's query over every GPU may take a while; pages keep PROMETHEUS_TIMEOUT.
ACCOUNTING_PROMETHEUS_TIMEOUT = env_float("ACCOUNTING_PROMETHEUS_TIMEOUT", 120.0)
# The currency GPU prices (admin: GPU prices) and costs are in.
ACCOUNTING_CURRENCY = env_str("ACCOUNTING_CURRENCY", "USD") or "USD"

# --- Notifications ---------------------------------------------------------------------
# Links in notices point here (the address people open the portal at).
PORTAL_URL = (env_str("PORTAL_URL", "http://127.0.0.1:8000") or "").rstrip("/")
# Email through any SMTP server (Django's email backend); secrets also from *_FILE.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "127.0.0.1") or "127.0.0.1"
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "") or ""
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "") or ""
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 10.0)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "GPU Portal <gpu-portal@localhost>")
# Webhook and Slack posts give up after this many seconds (then retry with backoff).
NOTIFY_HTTP_TIMEOUT = env_float("NOTIFY_HTTP_TIMEOUT", 10.0)
# Loopback and private webhook URLs: fine in development, refused in production unless set.
NOTIFY_ALLOW_PRIVATE_URLS = env_bool("NOTIFY_ALLOW_PRIVATE_URLS", not PRODUCTION)
# A queued or pending job notifies its owner once after waiting this long.
NOTIFY_WAITING_AFTER_MINUTES = env_float("NOTIFY_WAITING_AFTER_MINUTES", 30.0)
# Lines of the log a "failed" notice ends with.
NOTIFY_LOG_LINES = env_int("NOTIFY_LOG_LINES", 20)
# A delivery still "sending" this long after its claim lost its worker (the send task's
# time limit is 90 s): the sweep sends it again, once per claim.
NOTIFY_SENDING_TIMEOUT_SECONDS = env_float("NOTIFY_SENDING_TIMEOUT_SECONDS", 300.0)

# --- REST API --------------------------------------------------------------------------
API_TOKEN_TTL_DAYS = env_int("API_TOKEN_TTL_DAYS", 90)
# Per-user limit on API writes (submit, cancel, preview): "<n>/<second|minute|hour|day>".
API_WRITE_RATE = env_str("API_WRITE_RATE", "120/min") or "120/min"
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 25,
    "DEFAULT_SCHEMA_CLASS": "core.apis.ApiSchema",
    "EXCEPTION_HANDLER": "portal.exception_handler.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["portal.throttling.WriteRateThrottle"],
    # The API speaks JSON only: form and multipart bodies get a 415 before they are read.
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "core.negotiation.BlankAcceptNegotiation",
    # ``?format=json`` is the manifest endpoint's own parameter, not DRF's renderer switch.
    "URL_FORMAT_OVERRIDE": None,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"]
    + ([] if PRODUCTION else ["rest_framework.renderers.BrowsableAPIRenderer"]),
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Portal API",
    "DESCRIPTION": "Submit and follow GPU training and inference jobs on a shared cluster.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI's assets come from the installed sidecar package, never from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # The default enum hook, then: every free-text string refuses NUL, as the API does.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "portal.openapi.nul_free_strings",
    ],
    "ENUM_NAME_OVERRIDES": {
        "JobKindEnum": "jobs.models.Job.Kind",
        "JobStateEnum": "jobs.models.JobState",
    },
}

# The cache holds API throttling counters; Redis shares them across processes.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": env_str("CACHE_URL", REDIS_URL) or REDIS_URL,
        "KEY_PREFIX": "gpu-portal",
        "TIMEOUT": 300,
    }
}

# --- Security --------------------------------------------------------------------------
# Request bodies: a job spec is a few KiB; refuse anything far larger before parsing it.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MAX_REQUEST_BYTES", 1024 * 1024)
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 12 * 3600)
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; "
    # plotly.js and htmx set inline styles; no inline scripts are allowed anywhere.
    "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    # Behind an ingress that terminates TLS and sets X-Forwarded-Proto.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO") or "INFO"},
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}
