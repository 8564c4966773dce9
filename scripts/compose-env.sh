#!/usr/bin/env bash
# Write .env for docker-compose.yml with a fresh random password for every store user
# and for Grafana; an existing .env is left as it is. Keep the file to yourself (mode 600).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -e .env ]; then
    echo ".env exists; not touching it" >&2
    exit 0
fi
secret() { python3 -c 'import secrets; print(secrets.token_hex(24))'; }
umask 077
cat > .env <<ENV
KAIROS_MYSQL_ADMIN_PASSWORD=$(secret)
KAIROS_MYSQL_PASSWORD=$(secret)
KAIROS_REDIS_PASSWORD=$(secret)
KAIROS_RABBITMQ_ADMIN_PASSWORD=$(secret)
KAIROS_RABBITMQ_PASSWORD=$(secret)
KAIROS_GRAFANA_PASSWORD=$(secret)
ENV
echo "wrote .env (mode 600): docker compose up -d --build"
