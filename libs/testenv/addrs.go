package testenv

import (
	"os"
	"strings"
)

// env returns the environment variable name, or def when it is unset.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// RedlockAddrs are the independent Redis nodes of the Redlock tests:
// $COORDKIT_TEST_REDLOCK_ADDRS (comma-separated) or the three deploy/dev/backends.sh starts.
func RedlockAddrs() []string {
	return strings.Split(env("COORDKIT_TEST_REDLOCK_ADDRS", "127.0.0.1:6380,127.0.0.1:6381,127.0.0.1:6382"), ",")
}

// ZooKeeperAddrs is the ZooKeeper ensemble of the tests: $COORDKIT_TEST_ZK_ADDRS
// (comma-separated) or 127.0.0.1:2181.
func ZooKeeperAddrs() []string {
	return strings.Split(env("COORDKIT_TEST_ZK_ADDRS", "127.0.0.1:2181"), ",")
}

// MySQLDSN is the go-sql-driver DSN of the tests' MySQL/MariaDB database:
// $COORDKIT_TEST_MYSQL_DSN or root@tcp(127.0.0.1:3306)/coordkit.
func MySQLDSN() string {
	return env("COORDKIT_TEST_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/coordkit")
}

// PostgresURL is the URL of the tests' PostgreSQL database: $COORDKIT_TEST_POSTGRES_URL or
// the one deploy/dev/backends.sh creates, postgres://postgres@127.0.0.1:5432/coordkit.
func PostgresURL() string {
	return env("COORDKIT_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/coordkit?sslmode=disable")
}
