package main

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestReferenceNamesEveryCommand: docs/reference.md keeps the section
// numbers §1..§13 that code and docs cite, and its §3 names every command
// the binary has (and every flag the root gives them all).
func TestReferenceNamesEveryCommand(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	heads := regexp.MustCompile(`(?m)^## (\d+)\. `).FindAllStringSubmatch(doc, -1)
	if len(heads) != 13 {
		t.Fatalf("docs/reference.md has %d numbered sections, want 13", len(heads))
	}
	for i, h := range heads {
		if h[1] != fmt.Sprint(i+1) {
			t.Fatalf("section %d of docs/reference.md is numbered %s", i+1, h[1])
		}
	}
	start := strings.Index(doc, "\n## 3. ")
	end := strings.Index(doc, "\n## 4. ")
	if start < 0 || end < start {
		t.Fatal("docs/reference.md has no §3")
	}
	cli := doc[start:end]
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			if sub.Runnable() && !strings.Contains(cli, "`"+sub.CommandPath()) {
				t.Errorf("docs/reference.md §3 does not name `%s`", sub.CommandPath())
			}
			walk(sub)
		}
	}
	root := newRoot(&bytes.Buffer{}, &bytes.Buffer{})
	walk(root)
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if !strings.Contains(cli, "--"+f.Name) {
			t.Errorf("docs/reference.md §3 does not name --%s", f.Name)
		}
	})
}
