#!/usr/bin/env bash
# Make sure MySQL (MariaDB), Redis and RabbitMQ (with its management API) answer on
# localhost. Start any that is installed but stopped; otherwise say what to start.
set -euo pipefail

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() {  # port, name, seconds
  local port=$1 name=$2 limit=$3 i
  for ((i = 0; i < limit * 5; i++)); do
    answers "$port" && { echo "ok: $name answers on 127.0.0.1:$port"; return 0; }
    sleep 0.2
  done
  echo "error: $name does not answer on 127.0.0.1:$port after ${limit}s" >&2
  return 1
}

ensure_mysql() {
  answers 3306 && { echo "ok: MySQL answers on 127.0.0.1:3306"; return 0; }
  if [ -x /usr/sbin/mariadbd ]; then
    echo "starting MariaDB"
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd \
      || service mariadb start
  elif command -v service >/dev/null && service --status-all 2>/dev/null | grep -q mysql; then
    service mysql start
  else
    echo "error: MySQL is not installed here; install MariaDB 10.11+ or point" \
      "KAIROS_DATABASE_URL at a running server" >&2
    return 1
  fi
  wait_for 3306 MySQL 60
}

ensure_redis() {
  answers 6379 && { echo "ok: Redis answers on 127.0.0.1:6379"; return 0; }
  command -v redis-server >/dev/null || {
    echo "error: Redis is not installed; install redis-server or set KAIROS_REDIS_URL" >&2
    return 1
  }
  echo "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  wait_for 6379 Redis 20
}

ensure_rabbitmq() {
  if ! answers 5672; then
    command -v rabbitmq-server >/dev/null || {
      echo "error: RabbitMQ is not installed; install rabbitmq-server 3.10+ or set" \
        "KAIROS_AMQP_URL" >&2
      return 1
    }
    echo "starting RabbitMQ"
    rabbitmq-server -detached
    wait_for 5672 RabbitMQ 90
  else
    echo "ok: RabbitMQ answers on 127.0.0.1:5672"
  fi
  if ! answers 15672; then
    echo "enabling the RabbitMQ management plugin (Kairos creates vhosts through it)"
    rabbitmq-plugins enable rabbitmq_management >/dev/null
    wait_for 15672 "RabbitMQ management" 60
  else
    echo "ok: RabbitMQ management answers on 127.0.0.1:15672"
  fi
}

ensure_mysql
ensure_redis
ensure_rabbitmq
