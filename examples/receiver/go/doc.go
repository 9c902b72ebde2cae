// Command receiver-example is a small orders service behind the Go
// idempotency receiver (package receiver; docs/receiver.md): the endpoint
// drainer's HTTP adapter calls, answering retries of one key with one order.
//
// Usage:
//
//	DATABASE_URL=postgres://... receiver-example [-addr 127.0.0.1:8080] [-mode seed|ietf]
//	    [-schema drainer_receiver] [-delay 0s] [-outside-transaction] [-rerun-abandoned]
//	    [-recovery-timeout 60s]
//
// -addr defaults to $ADDR, else 127.0.0.1:$PORT, else 127.0.0.1:8080; port 0
// picks a free port. Once listening it prints "listening on http://HOST:PORT"
// on standard output.
//
// Endpoints: POST /v1/orders (key required; the JSON body is stored as a new
// order, answered 201 with {"id": N, "order": BODY} and a Location header;
// the X-Account header is the key scope); GET /v1/orders/count answers
// {"count": N}, the number of orders made, so a test can count effects;
// GET /metrics serves drainer_receiver_abandoned_total.
//
// The order is inserted through receiver.Tx, in the transaction that writes
// the receiver's record (Options.InTransaction): killed mid-request, the
// service leaves neither order nor record, and the retry makes the order
// once. -outside-transaction inserts it on its own connection instead; a
// retry of an order whose process died then gets 409 outcome-unknown after
// -recovery-timeout (and the service logs the key at ERROR), or, with
// -rerun-abandoned, makes the order again. -delay holds each order that
// long after writing it, before answering (to observe the in-flight answer,
// or to kill the service mid-request); a client that hangs up meanwhile
// does not stop it, and a delay of a minute or more raises the receiver's
// IdleInTransactionTimeout to cover it.
//
// # Files
//
//	main.go       flags, the orders table, the handlers, the server
//	main_test.go  the service on a test database: first write, replay, mismatch
package main
