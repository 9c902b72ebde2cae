package mockprovider

import "slices"

// recordTuple records that key was received with the tuple header value tuple.
func (p *Provider) recordTuple(tuple, key string) {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	keys := p.tuples[tuple]
	if !slices.Contains(keys, key) {
		p.tuples[tuple] = append(keys, key)
	}
}

// KeysForTuple returns, in first-seen order, every Idempotency-Key received
// with the given X-Agent-Idempotency-Tuple header value. More than one key
// means a client sent one intent under two keys.
func (p *Provider) KeysForTuple(tupleHeader string) []string {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	return slices.Clone(p.tuples[tupleHeader])
}

// MultiKeyTuples returns, sorted, every X-Agent-Idempotency-Tuple value seen
// with more than one Idempotency-Key. It is empty for a correct client.
func (p *Provider) MultiKeyTuples() []string {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	var out []string
	for t, keys := range p.tuples {
		if len(keys) > 1 {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}
