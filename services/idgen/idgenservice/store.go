package idgenservice

import (
	"fmt"

	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
)

// SQL stores for Config.Store: where segment tags, and worker-id leases with LeasesSQL,
// live.
const (
	// StoreAuto is the one SQL database the process has (Deps.Postgres or Deps.MySQL), else
	// the SQLite file: the default. With both databases configured it is an error, since
	// moving IDs from one to the other would start their sequences anew.
	StoreAuto = "auto"
	// StoreSQLite is the file idgen.db in Deps.DataDir.
	StoreSQLite = "sqlite"
	// StoreMySQL is Deps.MySQL.
	StoreMySQL = "mysql"
	// StorePostgres is Deps.Postgres.
	StorePostgres = "postgres"
)

// sqlStore resolves cfg.Store against the databases in deps: the shared database to keep
// the ID tables in, or nil for the SQLite file. Errors name the flag to fix.
func sqlStore(deps service.Deps, store string) (*sqldb.DB, error) {
	switch store {
	case "", StoreAuto:
		switch {
		case deps.MySQL != nil && deps.Postgres != nil:
			return nil, fmt.Errorf("idgen: both --mysql-dsn and --postgres-url are set: choose where ID segments and worker leases live with --id-store %s or --id-store %s",
				StoreMySQL, StorePostgres)
		case deps.Postgres != nil:
			return deps.Postgres, nil
		default:
			return deps.MySQL, nil // nil: the SQLite file
		}
	case StoreSQLite:
		return nil, nil
	case StoreMySQL:
		if deps.MySQL == nil {
			return nil, fmt.Errorf("idgen: --id-store %s needs --mysql-dsn", StoreMySQL)
		}
		return deps.MySQL, nil
	case StorePostgres:
		if deps.Postgres == nil {
			return nil, fmt.Errorf("idgen: --id-store %s needs --postgres-url", StorePostgres)
		}
		return deps.Postgres, nil
	}
	return nil, fmt.Errorf("idgen: --id-store %q: want %s, %s, %s or %s", store, StoreAuto, StoreSQLite, StoreMySQL, StorePostgres)
}
