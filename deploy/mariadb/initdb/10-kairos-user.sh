# Sourced by the MariaDB image's entrypoint once, on a fresh data volume, after it made
# the database (MARIADB_DATABASE) and its owner (MARIADB_USER, which `kairos migrate`
# connects as). The services connect as `kairos`, which may read and write rows of that
# database and nothing else: no DDL, no other database, no grants.
docker_process_sql --database=mysql <<SQL
CREATE USER IF NOT EXISTS 'kairos'@'%' IDENTIFIED BY '${KAIROS_MYSQL_PASSWORD}';
GRANT SELECT, INSERT, UPDATE, DELETE ON \`${MARIADB_DATABASE}\`.* TO 'kairos'@'%';
SQL
