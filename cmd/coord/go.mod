module github.com/coordkit/coordkit/cmd/coord

go 1.26.0

replace (
	github.com/coordkit/coordkit/libs => ../../libs
	github.com/coordkit/coordkit/proto => ../../proto
	github.com/coordkit/coordkit/services/lock => ../../services/lock
)
