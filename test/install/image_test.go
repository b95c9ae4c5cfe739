package install

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/flowlb/flowlb/internal/shared/ociimage"
)

const repoRoot = "../.."

// makeImage runs `make image` with its output in a new directory.
func makeImage(t *testing.T, ref string) (dir, out string) {
	t.Helper()
	dir = t.TempDir()
	b, err := exec.Command("make", "-C", repoRoot, "--no-print-directory", "BIN="+dir, "IMAGE="+ref, "image").CombinedOutput()
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, b)
	}
	return dir, string(b)
}

func git(t *testing.T, args ...string) string {
	t.Helper()
	b, err := exec.Command("git", append([]string{"-C", repoRoot}, args...)...).Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(b))
}

// TestMakeImage builds the image twice, as a user would, and checks what
// docs/operations.md ("Image") promises: the same digest from the same
// tree, a layout go-containerregistry loads, the labels, user and
// entrypoint, and in each platform's image exactly the static binary
// `make build` wrote for this machine (or cross-built for the other).
func TestMakeImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds flowlb for two architectures, twice")
	}
	const ref = "ghcr.io/flowlb/flowlb:test"
	dir1, out1 := makeImage(t, ref)
	dir2, _ := makeImage(t, ref)
	tar1, err := os.ReadFile(filepath.Join(dir1, "flowlb-image.tar"))
	if err != nil {
		t.Fatal(err)
	}
	tar2, err := os.ReadFile(filepath.Join(dir2, "flowlb-image.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tar1, tar2) {
		t.Errorf("two builds of one tree: different archives (%d and %d bytes)", len(tar1), len(tar2))
	}

	layoutDir := t.TempDir()
	if err := ociimage.Unpack(bytes.NewReader(tar1), layoutDir); err != nil {
		t.Fatal(err)
	}
	idx, err := ociimage.LoadArchiveDir(layoutDir, ref)
	if err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out1, ref+"@"+d.String()) {
		t.Errorf("make image did not print %s@%s:\n%s", ref, d, out1)
	}

	version := versionOf(t, filepath.Join(dir1, "flowlb"))
	epoch, err := strconv.ParseInt(git(t, "log", "-1", "--format=%ct"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": git(t, "rev-parse", "HEAD"),
		"org.opencontainers.image.created":  time.Unix(epoch, 0).UTC().Format(time.RFC3339),
		"org.opencontainers.image.title":    "flowlb",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.source":   "https://github.com/flowlb/flowlb",
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var arches []string
	for _, desc := range m.Manifests {
		arch := desc.Platform.Architecture
		arches = append(arches, desc.Platform.String())
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.User != "65532:65532" || strings.Join(cf.Config.Entrypoint, " ") != "/usr/bin/flowlb" {
			t.Errorf("%s: user %q, entrypoint %q", arch, cf.Config.User, cf.Config.Entrypoint)
		}
		for k, want := range wantLabels {
			if got := cf.Config.Labels[k]; got != want {
				t.Errorf("%s: label %s = %q, want %q", arch, k, got, want)
			}
		}
		built := filepath.Join(dir1, "flowlb")
		if arch != runtime.GOARCH {
			built = filepath.Join(dir1, "flowlb-linux-"+arch)
		}
		want, err := os.ReadFile(built)
		if err != nil {
			t.Fatal(err)
		}
		got := imageFile(t, img, "usr/bin/flowlb")
		if !bytes.Equal(got, want) {
			t.Errorf("%s: /usr/bin/flowlb (%d bytes) is not %s (%d bytes)", arch, len(got), built, len(want))
		}
		assertStatic(t, arch, got)
	}
	if strings.Join(arches, " ") != "linux/amd64 linux/arm64" {
		t.Errorf("platforms %v, want linux/amd64 linux/arm64", arches)
	}
}

// versionOf is what `flowlb version` says, the stamp of make build.
func versionOf(t *testing.T, bin string) string {
	t.Helper()
	b, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "flowlb ")
	if !ok || v == "" || v == "0.1.0-dev" {
		t.Fatalf("flowlb version: %q, want the stamped version", b)
	}
	return v
}

// imageFile reads one file from the image's layers (the last layer that
// has it wins, as in the container's root).
func imageFile(t *testing.T, img v1.Image, name string) []byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var found []byte
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Name == name {
				if found, err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
		}
		rc.Close()
	}
	if found == nil {
		t.Fatalf("no %s in the image", name)
	}
	return found
}

// assertStatic: a binary with no program interpreter and no shared
// libraries runs on an image with nothing else in it.
func assertStatic(t *testing.T, arch string, b []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: not an ELF file: %v", arch, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: dynamically linked (has a program interpreter)", arch)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s: needs shared libraries %v", arch, libs)
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != machine {
		t.Errorf("%s: ELF machine %v", arch, f.Machine)
	}
}

// TestVersionScript: hack/version.sh gives a valid image tag.
func TestVersionScript(t *testing.T) {
	b, err := exec.Command(filepath.Join(repoRoot, "hack/version.sh")).Output()
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(b))
	if !regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`).MatchString(v) {
		t.Errorf("version %q is not a valid image tag", v)
	}
}
