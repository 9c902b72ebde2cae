package compensations

import (
	"slices"
	"testing"
)

// TestNewMap: the map lists the tools in name order, each beside its own
// compensation, and leaves out a tool whose compensation is empty.
func TestNewMap(t *testing.T) {
	m := NewMap(map[string]string{
		"ship_order":    "cancel_shipment",
		"charge_card":   "refund_card",
		"send_email":    "",
		"reserve_stock": "release_stock",
	})
	wantTools := []string{"charge_card", "reserve_stock", "ship_order"}
	wantComps := []string{"refund_card", "release_stock", "cancel_shipment"}
	if !slices.Equal(m.Tools, wantTools) || !slices.Equal(m.Comps, wantComps) {
		t.Errorf("NewMap = %v → %v; want %v → %v", m.Tools, m.Comps, wantTools, wantComps)
	}

	for _, in := range []map[string]string{nil, {}, {"send_email": ""}} {
		m := NewMap(in)
		if len(m.Tools) != 0 || len(m.Comps) != 0 {
			t.Errorf("NewMap(%v) = %v → %v; want no tools", in, m.Tools, m.Comps)
		}
	}
}
