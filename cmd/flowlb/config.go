package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/flowlb/flowlb/internal/shared/config"
)

//go:generate go test -run TestConfigExamples -update .

// withConfig gives a daemon --config and --print-config: before it runs,
// the file and the environment set the flags not given on the command
// line (internal/shared/config).
func withConfig(cmd *cobra.Command) *cobra.Command {
	var path string
	var printOnly bool
	f := cmd.Flags()
	f.StringVar(&path, "config", "", "YAML file of settings whose keys are this command's flag names; flags given on the command line win over it")
	f.BoolVar(&printOnly, "print-config", false, "print the effective configuration (YAML, secrets redacted) and exit")
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		src, err := config.Apply(cmd.Flags(), path, os.LookupEnv)
		if err != nil {
			return err
		}
		if printOnly {
			return config.Print(cmd.OutOrStdout(), "effective configuration of flowlb "+cmd.Name(), cmd.Flags(), src)
		}
		return run(cmd, args)
	}
	return cmd
}
