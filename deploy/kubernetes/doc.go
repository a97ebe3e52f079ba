// Package kubernetes holds Neptune's Kubernetes manifests, the YAML files
// in this directory (docs/operations.md, "Kubernetes"), and the test that
// checks them against the Kubernetes API types and the neptune binary's
// own flags and config parsers. It has no code.
package kubernetes
