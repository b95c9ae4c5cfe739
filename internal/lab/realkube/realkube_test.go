package realkube

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flowlb/flowlb/internal/shared/ociimage"
)

// staticELF writes the smallest file debug/elf reads as a static
// executable (a header, no program headers: no interpreter).
func staticELF(t *testing.T) string {
	t.Helper()
	h := make([]byte, 64)
	copy(h, "\x7fELF")
	h[4], h[5], h[6] = 2, 1, 1                // 64-bit, little-endian, version 1
	binary.LittleEndian.PutUint16(h[16:], 2)  // ET_EXEC
	binary.LittleEndian.PutUint16(h[18:], 62) // EM_X86_64
	binary.LittleEndian.PutUint32(h[20:], 1)  // version
	binary.LittleEndian.PutUint16(h[52:], 64) // header size
	binary.LittleEndian.PutUint16(h[54:], 56) // program header size
	binary.LittleEndian.PutUint16(h[58:], 64) // section header size
	p := filepath.Join(t.TempDir(), "flowlb")
	if err := os.WriteFile(p, h, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// indexDigest reads the digest of the image named ref in the archive.
func indexDigest(t *testing.T, archive, ref string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	if err := ociimage.Unpack(f, dir); err != nil {
		t.Fatal(err)
	}
	idx, err := ociimage.LoadArchiveDir(dir, ref)
	if err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// A marked image of the same binary is another tag and another image
// (digest), in the same archive: an upgrade that changes what the nodes
// run. The unmarked one is FlowlbImage's.
func TestFlowlbImages(t *testing.T) {
	exe := staticELF(t)
	ref, path, err := FlowlbImage(exe, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ref, "flowlb.lab/flowlb:sha-") {
		t.Fatalf("ref %q", ref)
	}
	refs, both, err := FlowlbImages(exe, t.TempDir(), "", "next")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{ref, ref + "-next"}; !slices.Equal(refs, want) {
		t.Fatalf("refs %q, want %q", refs, want)
	}
	d := indexDigest(t, path, ref)
	if got := indexDigest(t, both, ref); got != d {
		t.Errorf("%s: %s beside the marked image, %s alone", ref, got, d)
	}
	if next := indexDigest(t, both, refs[1]); next == d {
		t.Errorf("the marked image has the digest %s of the unmarked one", d)
	}
}
