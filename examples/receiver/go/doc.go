// Command receiver-example is a small orders service behind the Go
// idempotency receiver (package receiver; docs/receiver.md): the endpoint
// drainer's HTTP adapter calls, answering retries of one key with one order.
//
// Usage:
//
//	DATABASE_URL=postgres://... receiver-example [-addr 127.0.0.1:8080] [-mode seed|ietf]
//	    [-schema drainer_receiver] [-delay 0s] [-in-transaction]
//
// -addr defaults to $ADDR, else 127.0.0.1:$PORT, else 127.0.0.1:8080; port 0
// picks a free port. Once listening it prints "listening on http://HOST:PORT"
// on standard output.
//
// Endpoints: POST /v1/orders (key required; the JSON body is stored as a new
// order, answered 201 with {"id": N, "order": BODY} and a Location header;
// the X-Account header is the key scope); GET /v1/orders/count answers
// {"count": N}, the number of orders made, so a test can count effects.
// -delay holds each order that long before answering (to observe the
// in-flight answer); with -in-transaction the order is inserted in the
// transaction that stores the answer (receiver.Tx).
//
// # Files
//
//	main.go       flags, the orders table, the handlers, the server
//	main_test.go  the service on a test database: first write, replay, mismatch
package main
