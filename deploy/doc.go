// Package deploy holds drainer's Kubernetes manifests (apply with
// `kubectl apply -k deploy/`; see README.md) and, in helm/drainer, a Helm
// chart of the same objects. It has no code: its Go tests decode every
// manifest strictly into the Kubernetes API types (the custom resources into
// mirror types checked against a copy of their CRD schemas in
// testdata/crds), so an unknown field or a wrong type fails `go test`, and
// check how the pieces fit: probes, ports, grace period versus
// --shutdown-timeout, the Secret keys and ${env:…} references of the config,
// which must pass drainer's own config loader. helm_test.go renders the
// chart with Helm's Go packages and runs the same checks on its output.
package deploy
