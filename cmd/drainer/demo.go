package main

import "github.com/spf13/cobra"

func newDemoCmd() *cobra.Command {
	return &cobra.Command{Use: "demo", Short: "Drain sample intents against a throwaway Postgres and a mock provider"}
}
