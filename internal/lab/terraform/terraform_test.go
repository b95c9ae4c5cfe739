package terraform

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWorkdir(t *testing.T) {
	dir := t.TempDir()
	work, env, err := Workdir(dir, "/opt/provider dir", "# config\n")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(work, "main.tf")); err != nil || string(got) != "# config\n" {
		t.Errorf("main.tf: %q %v", got, err)
	}
	rc := filepath.Join(dir, "terraformrc")
	if len(env) == 0 || env[0] != "TF_CLI_CONFIG_FILE="+rc {
		t.Errorf("env %v, want TF_CLI_CONFIG_FILE=%s first", env, rc)
	}
	got, err := os.ReadFile(rc)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"terraform-provider-openstack/openstack" = "/opt/provider dir"`; !strings.Contains(string(got), want) {
		t.Errorf("terraformrc %s, want the override %s", got, want)
	}
	if _, _, err := Workdir(dir, "/p", ""); err == nil {
		t.Error("a second Workdir in the same directory: no error")
	}
}
