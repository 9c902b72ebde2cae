// Package stripe is the "stripe" adapter: a preset over HTTP that creates
// Stripe objects, one POST per attempt, with the row's idempotency key as
// Stripe's Idempotency-Key, so that Stripe itself guarantees at most one
// object per key within its 24-hour window.
//
// # Endpoints
//
// The URL never comes from the payload. The row's tool_name selects the
// endpoint from a fixed table (Config.Tools adds entries); the host is the
// configured base URL (https://api.stripe.com by default). Only creating
// calls are listed: their paths hold no object id, which would have to come
// from the payload.
//
//	tool_name                                                    endpoint
//	stripe.charges.create, create_charge, charge_card            POST /v1/charges
//	stripe.payment_intents.create, create_payment_intent         POST /v1/payment_intents
//	stripe.setup_intents.create, create_setup_intent             POST /v1/setup_intents
//	stripe.refunds.create, create_refund, refund_charge,
//	  refund_card                                                POST /v1/refunds
//	stripe.customers.create, create_customer                     POST /v1/customers
//	stripe.transfers.create, create_transfer                     POST /v1/transfers
//	stripe.payouts.create, create_payout                         POST /v1/payouts
//	stripe.invoices.create, create_invoice                       POST /v1/invoices
//	stripe.invoiceitems.create, create_invoice_item              POST /v1/invoiceitems
//	stripe.subscriptions.create, create_subscription             POST /v1/subscriptions
//	stripe.products.create, create_product                       POST /v1/products
//	stripe.prices.create, create_price                           POST /v1/prices
//	stripe.checkout.sessions.create, create_checkout_session     POST /v1/checkout/sessions
//	stripe.payment_links.create, create_payment_link             POST /v1/payment_links
//
// A row whose tool_name is not in the table is Terminal (reason
// unknown_tool) and its error lists the supported names; nothing is sent.
//
// # Request
//
// The payload is a JSON object of the endpoint's parameters, sent as a form
// (see FormEncode): {"amount": 1250, "currency": "eur", "metadata":
// {"order": "A-17"}} becomes amount=1250&currency=eur&metadata[order]=A-17.
// Headers: Authorization: Bearer <api key>, Idempotency-Key: <row key>,
// Stripe-Version when configured, Content-Type:
// application/x-www-form-urlencoded and X-Agent-Idempotency-Tuple.
//
// # Classification
//
// dispatch.ClassifyHTTP decides first: 2xx is Success, or Replay with
// Idempotent-Replayed: true; 401, 403 and 407 are Auth, whatever else the
// answer says. Then, in order:
//
//   - Stripe-Should-Retry: true is Retry, false is Terminal, whatever the
//     status;
//   - 409 (the key is used by a request still running) and 429 (rate limit,
//     lock timeout) are Retry;
//   - the error object's type: card_error, invalid_request_error and
//     idempotency_error (the key was first used with other parameters) are
//     Terminal; api_error and rate_limit_error are Retry;
//   - otherwise the status class (5xx Retry, other 4xx Terminal).
//
// Retry-After is honoured as a floor. A success stores Stripe's JSON answer
// as the row's response. Errors (APIError) carry Stripe's status, type,
// code, decline code, parameter name, message and request id, never the API
// key, the idempotency key (replaced if Stripe's message quotes it) or the
// payload. Stripe's message may still quote a parameter value it rejects.
package stripe
