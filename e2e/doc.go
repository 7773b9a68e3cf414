// Package e2e holds coordkit's black-box end-to-end tests: they build the static coord binary
// exactly as deploy/Dockerfile does (deploy/build-static.sh), run several `coord serve`
// processes against the real dev backends and private backend processes, and attack them with
// the classic coordination scenarios (a flash sale, a task grab) under real faults (SIGKILL, SIGSTOP, backend restarts). Nothing here is
// imported by the product; the package exists for its tests:
//
//	go test -race ./e2e/...
package e2e
