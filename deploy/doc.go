// Package deploy holds no code: its tests check the deployment files
// beside it (systemd units, the NATS cluster's configuration, compose,
// Kubernetes manifests, Prometheus rules, the Grafana dashboard) with
// the tools that read them, and fold runs through them with the real
// binaries, built from the module in the directory above.
//
// It is a module of its own so that the main module has no Kubernetes or
// Prometheus server dependency: run its tests with
//
//	cd deploy && go test ./...
package deploy
