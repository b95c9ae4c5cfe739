// Command flowlb is the single binary for every flowlb role: API server,
// node agent, Kubernetes controller and the network-namespace lab.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/flowlb/flowlb/internal/version"
)

// rootCmd gathers the subcommands; each lives in its own file and adds
// itself in an init function so that roles stay independent.
var rootCmd = &cobra.Command{
	Use:           "flowlb",
	Short:         "Distributed, Octavia-compatible load balancing as kernel flows",
	SilenceUsage:  true,
	SilenceErrors: true,
}

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the flowlb version",
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "flowlb", version.Version)
		},
	})
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "flowlb:", err)
		os.Exit(1)
	}
}
