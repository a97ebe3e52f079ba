// Package version is the release this source tree is, and the revision a
// build stamps into the binary, so `neptune version` is right whether or
// not the builder's VCS stamping was on.
package version

// Release is this tree's version; raise it with each release, with its
// entry in CHANGELOG.md.
const Release = "0.10.0"

// Commit is the source revision, set by the build:
//
//	go build -ldflags "-X github.com/neptune-cluster/neptune/internal/version.Commit=$(git rev-parse --short HEAD)" ./cmd/neptune
//
// (the Dockerfile does). Empty when the build did not stamp it.
var Commit string
