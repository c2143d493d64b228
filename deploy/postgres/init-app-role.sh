#!/bin/sh
# Create the application's PostgreSQL role (docs/operations.md, "Database roles"). The postgres
# image runs this once, when it initialises an empty data directory; elsewhere run it once as a
# PostgreSQL superuser (libpq's PGHOST, PGPORT… say where). `manage.py migrate`, run as the owner
# with MCPTASKS_DB_APP_ROLE set, then grants the role what it may do (mcptasks/dbroles.py).
#   POSTGRES_USER, POSTGRES_DB      who runs this, and the database (the postgres image sets both)
#   MCPTASKS_DB_APP_ROLE            the role's name (default mcptasks_app)
#   POSTGRES_APP_PASSWORD           its password
set -eu
: "${POSTGRES_APP_PASSWORD:?set POSTGRES_APP_PASSWORD}"
psql -v ON_ERROR_STOP=1 -q --no-psqlrc \
  --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
  -v role="${MCPTASKS_DB_APP_ROLE:-mcptasks_app}" -v password="$POSTGRES_APP_PASSWORD" <<'SQL'
CREATE ROLE :"role" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'password';
SQL
echo "init-app-role: created the application role ${MCPTASKS_DB_APP_ROLE:-mcptasks_app}"
