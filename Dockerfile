# syntax=docker/dockerfile:1
# The GPU Portal image. One image runs every role in docker-compose.yml:
# gunicorn (the default command; gunicorn.conf.py sets it up), `manage.py migrate`,
# `celery -A portal worker` and `beat`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    # The source tree in /app (templates/, static/ and the packages) wins over the installed copy.
    PYTHONPATH=/app \
    STATIC_ROOT=/app/staticfiles \
    PORTAL_ENV=production

WORKDIR /app

RUN groupadd --system --gid 10001 portal \
    && useradd --system --uid 10001 --gid portal --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin portal

# Dependencies first, read from pyproject.toml: this layer changes only when they do.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
       > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY . .
RUN pip install --no-deps . \
    && rm -rf build ./*.egg-info

# collectstatic with the production storage (hashed names + manifest, which production
# templates need). Settings refuse production without a secret key, so the build uses a
# throwaway random one that never reaches the image's environment; nothing connects to
# the database here.
RUN SECRET_KEY="$(python -c 'import secrets; print(secrets.token_urlsafe(64))')" \
    DATABASE_URL=postgres://build@localhost/build \
    python manage.py collectstatic --noinput \
    && mkdir -p /app/var \
    && chown portal:portal /app/var

USER portal:portal
EXPOSE 8000

CMD ["gunicorn", "portal.wsgi:application"]
