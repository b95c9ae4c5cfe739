// Package terraform finds the Terraform CLI and the Terraform OpenStack
// provider hack/terraform-provider-bins.sh builds, and prepares a working
// directory whose CLI configuration points Terraform at that provider
// (dev_overrides: no registry is reachable), for the tests that drive
// Terraform against flowlb's API or the test bed's real Octavia.
package terraform

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// ProviderVersion is the Terraform OpenStack provider
// hack/terraform-provider-bins.sh builds.
const ProviderVersion = "v1.54.1"

// RequireEnv, set to 1, turns a missing Terraform CLI or provider from a
// skip into a failure. Terraform has no Debian package, so a fresh
// machine has none.
const RequireEnv = "FLOWLB_REQUIRE_TERRAFORM"

// Tools returns the terraform CLI and the provider's directory
// (FLOWLB_TF_PROVIDER_DIR, or the cache of hack/terraform-provider-bins.sh),
// skipping t when either is missing (failing it under RequireEnv=1).
func Tools(t testing.TB) (cli, providerDir string) {
	t.Helper()
	missing := func(what string) {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s=1 but %s", RequireEnv, what)
		}
		t.Skip(what)
	}
	cli, err := exec.LookPath("terraform")
	if err != nil {
		missing("no terraform in PATH")
	}
	providerDir = os.Getenv("FLOWLB_TF_PROVIDER_DIR")
	if providerDir == "" {
		providerDir = filepath.Join("/var/cache/flowlb/terraform-provider-openstack", ProviderVersion)
	}
	if _, err := os.Stat(filepath.Join(providerDir, "terraform-provider-openstack")); err != nil {
		missing("no Terraform OpenStack provider in " + providerDir + ": run hack/terraform-provider-bins.sh")
	}
	return cli, providerDir
}

// Workdir writes config as main.tf into a new directory under dir and a
// CLI configuration beside it that takes the provider from providerDir.
// It returns the directory to run terraform in and the environment
// (beyond the caller's) terraform needs there.
func Workdir(dir, providerDir, config string) (work string, env []string, err error) {
	rc := filepath.Join(dir, "terraformrc")
	if err := os.WriteFile(rc, []byte(fmt.Sprintf(`provider_installation {
  dev_overrides { "terraform-provider-openstack/openstack" = %q }
  direct {}
}
`, providerDir)), 0o600); err != nil {
		return "", nil, err
	}
	work = filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(filepath.Join(work, "main.tf"), []byte(config), 0o600); err != nil {
		return "", nil, err
	}
	return work, []string{"TF_CLI_CONFIG_FILE=" + rc, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1"}, nil
}
