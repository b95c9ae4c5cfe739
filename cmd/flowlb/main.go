// Command flowlb is the single binary for every flowlb role: API server,
// node agent, Kubernetes controller and the network-namespace lab.
package main

import (
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"

	"github.com/flowlb/flowlb/internal/shared/version"
)

// rootCmd gathers the subcommands; each lives in its own file and adds
// itself in an init function so that roles stay independent.
var rootCmd = &cobra.Command{
	Use:           "flowlb",
	Short:         "Distributed, Octavia-compatible load balancing as kernel flows",
	SilenceUsage:  true,
	SilenceErrors: true,
}

// cpuProfile, when set (--cpuprofile, hidden: a tool for whoever
// measures), is where a command writes the CPU profile of its whole run,
// when it returns (a server or controller: after SIGTERM).
var cpuProfile string

func init() {
	rootCmd.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file")
	_ = rootCmd.PersistentFlags().MarkHidden("cpuprofile")
	var profile *os.File
	rootCmd.PersistentPreRunE = func(*cobra.Command, []string) error {
		if cpuProfile == "" {
			return nil
		}
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		profile = f
		return pprof.StartCPUProfile(f)
	}
	rootCmd.PersistentPostRunE = func(*cobra.Command, []string) error {
		if profile == nil {
			return nil
		}
		pprof.StopCPUProfile()
		return profile.Close()
	}
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
