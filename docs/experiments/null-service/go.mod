module coordkit.dev/experiments/nullservice

go 1.26.0

replace (
	github.com/coordkit/coordkit/libs/client => ../../../libs/client
)

require (
	github.com/coordkit/coordkit/libs/client v0.0.0-00010101000000-000000000000
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	connectrpc.com/connect v1.21.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
