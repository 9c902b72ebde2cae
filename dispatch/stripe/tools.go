package stripe

import (
	"maps"
	"regexp"
	"slices"
)

// endpoints maps each built-in tool_name to the Stripe API path it creates
// an object at. Every entry is a POST that creates something, the only kind
// of call that is both keyed by an Idempotency-Key and free of object ids in
// the path: ids would have to come from the payload, and the URL never does.
// Keep the package documentation's table in step with this one.
var endpoints = func() map[string]string {
	m := map[string]string{}
	for path, names := range map[string][]string{
		"/v1/charges":           {"stripe.charges.create", "create_charge", "charge_card"},
		"/v1/payment_intents":   {"stripe.payment_intents.create", "create_payment_intent"},
		"/v1/setup_intents":     {"stripe.setup_intents.create", "create_setup_intent"},
		"/v1/refunds":           {"stripe.refunds.create", "create_refund", "refund_charge", "refund_card"},
		"/v1/customers":         {"stripe.customers.create", "create_customer"},
		"/v1/transfers":         {"stripe.transfers.create", "create_transfer"},
		"/v1/payouts":           {"stripe.payouts.create", "create_payout"},
		"/v1/invoices":          {"stripe.invoices.create", "create_invoice"},
		"/v1/invoiceitems":      {"stripe.invoiceitems.create", "create_invoice_item"},
		"/v1/subscriptions":     {"stripe.subscriptions.create", "create_subscription"},
		"/v1/products":          {"stripe.products.create", "create_product"},
		"/v1/prices":            {"stripe.prices.create", "create_price"},
		"/v1/checkout/sessions": {"stripe.checkout.sessions.create", "create_checkout_session"},
		"/v1/payment_links":     {"stripe.payment_links.create", "create_payment_link"},
	} {
		for _, name := range names {
			m[name] = path
		}
	}
	return m
}()

// Tools returns the built-in tool names in sorted order.
func Tools() []string { return slices.Sorted(maps.Keys(endpoints)) }

// Endpoint returns the API path of a built-in tool name.
func Endpoint(tool string) (path string, ok bool) {
	path, ok = endpoints[tool]
	return path, ok
}

// apiPath is the syntax of a path Config.Tools may name: a form-encoded v1
// endpoint, lower-case segments only (no ids with upper-case letters, no
// query, no dot segments).
var apiPath = regexp.MustCompile(`^/v1(/[a-z0-9_]+)+$`)
