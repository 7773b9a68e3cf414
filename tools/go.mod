// Module tools pins the code generators (run with `go tool -modfile=../tools/go.mod`),
// kept apart from the workspace so their dependencies never leak into coordkit's own builds.
module github.com/coordkit/coordkit/tools

go 1.26.7

tool (
	connectrpc.com/connect/cmd/protoc-gen-connect-go
	google.golang.org/protobuf/cmd/protoc-gen-go
)

require (
	connectrpc.com/connect v1.21.1 // indirect
	google.golang.org/protobuf v1.36.13-0.20261016172727-e9ee2a76ab8e // indirect
)
