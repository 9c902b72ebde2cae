// Package dashboards holds drainer's Grafana dashboard (drainer.json) and
// Prometheus alerting rules (alerts.rules.yaml, unit-tested by promtool with
// alerts_test.yaml). It has no code: its Go tests parse every PromQL
// expression of the dashboard and the rules and check that each drainer_*
// metric they use is one the daemon exports, and that every panel queries
// the dashboard's datasource variable, and that every series of a database
// (the database label of a fleet draining many) filters on the dashboard's
// database variable.
package dashboards
