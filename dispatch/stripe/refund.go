package stripe

import (
	"encoding/json"
	"errors"
	"fmt"
)

// refundsPath is the endpoint of Stripe's refunds.
const refundsPath = "/v1/refunds"

// refundOf turns a compensation row's payload (forward_key,
// forward_payload, forward_response: docs/sagas.md) into the parameters of
// the refund that undoes the forward call: the charge or the payment
// intent its answer created (its object and id), in full, with the forward
// row's key in the refund's metadata (drainer_forward_key). A saga's
// refund route therefore needs no payload of its own. An answer that is
// neither a charge nor a payment intent cannot be refunded: the error
// names what it found, never a value.
func refundOf(payload json.RawMessage) (json.RawMessage, error) {
	var c struct {
		ForwardKey      string `json:"forward_key"`
		ForwardResponse struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		} `json:"forward_response"`
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return nil, fmt.Errorf("%w: a compensation's payload is not the saga's object (forward_key, forward_payload, forward_response)", ErrInvalidPayload)
	}
	r := c.ForwardResponse
	var field string
	switch r.Object {
	case "charge":
		field = "charge"
	case "payment_intent":
		field = "payment_intent"
	}
	if field == "" || r.ID == "" {
		return nil, errors.New("a refund undoes a charge or a payment intent, and the forward call's answer (forward_response) has no object \"charge\" or \"payment_intent\" with an id")
	}
	return json.Marshal(map[string]any{field: r.ID, "metadata": map[string]string{"drainer_forward_key": c.ForwardKey}})
}
