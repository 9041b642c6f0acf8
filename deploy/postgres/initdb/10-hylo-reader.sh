#!/bin/sh
# Run once by the postgres image on an empty data directory (docker-entrypoint-initdb.d): create the
# read-only role of deploy/postgres/sql/reader.sql for the query API.
set -eu
# the password comes from a mounted secret (compose: /run/secrets/reader_password), never the command line
if [ -n "${HYLO_READER_PASSWORD_FILE:-}" ]; then
  HYLO_READER_PASSWORD="$(cat "$HYLO_READER_PASSWORD_FILE")"
fi
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v reader="${HYLO_READER_USER:-hylo_reader}" \
    -v reader_password="${HYLO_READER_PASSWORD:?set HYLO_READER_PASSWORD}" \
    -v owner="$POSTGRES_USER" \
    -v db="$POSTGRES_DB" \
    -f /etc/hylo/reader.sql
