package config

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

func TestHangHunt(t *testing.T) {
	if os.Getenv("HUNT") == "" {
		t.Skip()
	}
	seeds := [][]byte{}
	for _, n := range []string{"testdata/example.yaml", "testdata/all_types.yaml"} {
		b, _ := os.ReadFile(n)
		seeds = append(seeds, b)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		s := append([]byte(nil), seeds[r.IntN(len(seeds))]...)
		for k := 0; k < 1+r.IntN(4); k++ {
			p := r.IntN(len(s))
			switch r.IntN(3) {
			case 0:
				s[p] = byte(r.IntN(128))
			case 1:
				s = append(s[:p], s[min(len(s), p+1+r.IntN(8)):]...)
			case 2:
				s = append(s[:p], append([]byte{"{}[]:,-&*!|>'\"#\n $"[r.IntN(18)]}, s[p:]...)...)
			}
			if len(s) == 0 {
				break
			}
		}
		done := make(chan struct{})
		go func() { Parse("x", s, LoadOptions{}); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			os.WriteFile("/tmp/hang.yaml", s, 0o644)
			t.Fatalf("hang after %d", i)
		}
	}
}
