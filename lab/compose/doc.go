// Package compose holds the test of deploy/: it builds the container
// image, starts deploy/compose.yaml (a secured 3-node cluster, its init
// service and a gateway) under a project of its own, and runs list
// appends through the gateway while it kills a node container, brings it
// back on a new address and restarts every node in turn; then it reads
// every replica and checks that each acknowledged append is there exactly
// once. Last it reaches every member's HTTPS listener with the scraper
// certificate (as deploy/prometheus.yml does) and with an operator token
// it then revokes. See compose_test.go and docs/operations.md,
// "Containers and Compose".
package compose
