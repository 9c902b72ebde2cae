package mockprovider

import "encoding/binary"

// fault is the fault chosen for an admitted request.
type fault int

const (
	faultNone fault = iota
	fault503
	fault429
	fault529
	faultTimeout
	faultReset
)

// pickFault draws the random fault of the n-th request of key.
func (p *Provider) pickFault(key string, n int) fault {
	c := &p.cfg
	if c.Fail503+c.Fail429+c.Fail529+c.Timeout+c.ResetAfterEffect == 0 {
		return faultNone
	}
	u := uniform(c.Seed, key, n)
	for _, x := range [...]struct {
		rate float64
		f    fault
	}{
		{c.Fail503, fault503},
		{c.Fail429, fault429},
		{c.Fail529, fault529},
		{c.Timeout, faultTimeout},
		{c.ResetAfterEffect, faultReset},
	} {
		if u < x.rate {
			return x.f
		}
		u -= x.rate
	}
	return faultNone
}

// uniform returns a number in [0, 1) that depends only on seed, key and n.
func uniform(seed int64, key string, n int) float64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:8], uint64(seed))
	binary.LittleEndian.PutUint64(buf[8:], uint64(n))
	for _, b := range buf {
		h = (h ^ uint64(b)) * prime
	}
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * prime
	}
	// splitmix64 finalizer: FNV alone mixes the last bytes poorly.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return float64(h>>11) / (1 << 53)
}
