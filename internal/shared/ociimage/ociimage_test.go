package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

func testSpec() Spec {
	return Spec{
		Binaries: []Binary{ // out of order on purpose: the index is sorted
			{OS: "linux", Arch: "arm64", Content: []byte("arm64 flowlb")},
			{OS: "linux", Arch: "amd64", Content: []byte("amd64 flowlb")},
		},
		Version:  "v1.2.3",
		Revision: "0123456789abcdef0123456789abcdef01234567",
		Source:   "https://github.com/flowlb/flowlb",
		Created:  time.Unix(1700000000, 0),
	}
}

// entry is a layer's tar entry as the test compares it.
type entry struct {
	mode     int64
	uid, gid int
	mtime    int64
	body     string
}

func layerEntries(t *testing.T, l v1.Layer) map[string]entry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner names %q/%q in the layer", h.Name, h.Uname, h.Gname)
		}
		out[h.Name] = entry{mode: h.Mode, uid: h.Uid, gid: h.Gid, mtime: h.ModTime.Unix(), body: string(b)}
	}
}

func TestBuild(t *testing.T) {
	s := testSpec()
	idx, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 || m.Manifests[0].Platform.Architecture != "amd64" || m.Manifests[1].Platform.Architecture != "arm64" {
		t.Fatalf("manifests: %+v", m.Manifests)
	}
	var baseDigests []v1.Hash
	for _, desc := range m.Manifests {
		arch := desc.Platform.Architecture
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != arch || !cf.Created.Time.Equal(s.Created) {
			t.Errorf("%s: config os/arch/created %s/%s/%v", arch, cf.OS, cf.Architecture, cf.Created)
		}
		c := cf.Config
		if c.User != "65532:65532" || strings.Join(c.Entrypoint, " ") != "/usr/bin/flowlb" || len(c.Cmd) != 0 {
			t.Errorf("%s: user %q entrypoint %q cmd %q", arch, c.User, c.Entrypoint, c.Cmd)
		}
		for k, want := range map[string]string{
			"org.opencontainers.image.title":    "flowlb",
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.version":  "v1.2.3",
			"org.opencontainers.image.revision": s.Revision,
			"org.opencontainers.image.source":   "https://github.com/flowlb/flowlb",
			"org.opencontainers.image.created":  "2023-11-14T22:13:20Z",
		} {
			if c.Labels[k] != want {
				t.Errorf("%s: label %s = %q, want %q", arch, k, c.Labels[k], want)
			}
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		if len(layers) != 2 {
			t.Fatalf("%s: %d layers", arch, len(layers))
		}
		d, err := layers[0].Digest()
		if err != nil {
			t.Fatal(err)
		}
		baseDigests = append(baseDigests, d)
		base := layerEntries(t, layers[0])
		if e := base["etc/passwd"]; !strings.Contains(e.body, "flowlb:x:65532:65532:") {
			t.Errorf("%s: /etc/passwd %q has no flowlb user 65532", arch, e.body)
		}
		if e := base["tmp/"]; e.mode != 0o1777 {
			t.Errorf("%s: /tmp mode %o", arch, e.mode)
		}
		if e := base["var/lib/flowlb/"]; e.uid != UID || e.gid != UID || e.mode != 0o755 {
			t.Errorf("%s: /var/lib/flowlb %+v, want 0755 owned by %d", arch, e, UID)
		}
		bin := layerEntries(t, layers[1])
		want := entry{mode: 0o755, body: arch + " flowlb"}
		if got := bin["usr/bin/flowlb"]; got != want {
			t.Errorf("%s: /usr/bin/flowlb %+v, want %+v", arch, got, want)
		}
		for name, e := range mergeMaps(base, bin) {
			if e.mtime != 0 {
				t.Errorf("%s: %s has mtime %d, want the epoch", arch, name, e.mtime)
			}
			if e.uid != 0 && name != "var/lib/flowlb/" {
				t.Errorf("%s: %s owned by %d", arch, name, e.uid)
			}
		}
	}
	if baseDigests[0] != baseDigests[1] {
		t.Errorf("base layers differ between platforms: %v", baseDigests)
	}
}

func mergeMaps(a, b map[string]entry) map[string]entry {
	out := map[string]entry{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func digest(t *testing.T, s Spec) v1.Hash {
	t.Helper()
	idx, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestReproducible: the digest is a function of the spec alone, and
// every input shows in it.
func TestReproducible(t *testing.T) {
	d := digest(t, testSpec())
	if again := digest(t, testSpec()); again != d {
		t.Fatalf("same spec, digests %s and %s", d, again)
	}
	for name, change := range map[string]func(*Spec){
		"created":  func(s *Spec) { s.Created = s.Created.Add(time.Second) },
		"version":  func(s *Spec) { s.Version = "v1.2.4" },
		"revision": func(s *Spec) { s.Revision = strings.Repeat("f", 40) },
		"binary":   func(s *Spec) { s.Binaries[1].Content = []byte("other amd64 flowlb") },
		"platform": func(s *Spec) { s.Binaries = s.Binaries[:1] },
	} {
		s := testSpec()
		change(&s)
		if digest(t, s) == d {
			t.Errorf("%s changed, digest did not", name)
		}
	}
}

func TestBuildRefuses(t *testing.T) {
	s := testSpec()
	s.Binaries = append(s.Binaries, Binary{OS: "linux", Arch: "amd64", Content: []byte("x")})
	if _, err := Build(s); err == nil || !strings.Contains(err.Error(), "two binaries for linux/amd64") {
		t.Errorf("duplicate platform: %v", err)
	}
	if _, err := Build(Spec{}); err == nil {
		t.Error("no binaries: no error")
	}
}

// TestArchive: two archives of one spec are the same bytes, and the tar
// unpacks to a layout that go-containerregistry reads back as the index,
// named ref.
func TestArchive(t *testing.T) {
	const ref = "ghcr.io/flowlb/flowlb:v1.2.3"
	var tars [2]bytes.Buffer
	for i := range tars {
		idx, err := Build(testSpec())
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteArchive(&tars[i], idx, ref); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(tars[0].Bytes(), tars[1].Bytes()) {
		t.Fatal("two archives of one spec differ")
	}
	dir := untar(t, tars[0].Bytes())
	got, err := LoadArchiveDir(dir, ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(got); err != nil {
		t.Fatalf("validate the loaded index: %v", err)
	}
	if gd, d := mustDigest(t, got), digest(t, testSpec()); gd != d {
		t.Errorf("loaded index %s, built %s", gd, d)
	}
	if _, err := LoadArchiveDir(dir, "ghcr.io/flowlb/flowlb:other"); err == nil {
		t.Error("a ref the layout does not hold: no error")
	}
}

func mustDigest(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// untar checks that an archive's entries carry no time and no owner,
// and unpacks it.
func untar(t *testing.T, b []byte) string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.ModTime.Unix() != 0 || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %v owner %d:%d (%q:%q)", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
		}
	}
	dir := t.TempDir()
	if err := Unpack(bytes.NewReader(b), dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestUnpackRefusesEscapes(t *testing.T) {
	for _, name := range []string{"../evil", "/etc/evil", "a/../../evil"} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := Unpack(&buf, t.TempDir()); err == nil || !strings.Contains(err.Error(), "leaves the directory") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Reconfigure makes another image of the same layers; WriteArchives
// names both in one archive, which holds each blob once.
func TestReconfigureWriteArchives(t *testing.T) {
	const ref, next = "ghcr.io/flowlb/flowlb:v1.2.3", "ghcr.io/flowlb/flowlb:v1.2.3-next"
	s := testSpec()
	idx, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	s2 := s
	s2.Revision = "next"
	idx2, err := Reconfigure(idx, s2)
	if err != nil {
		t.Fatal(err)
	}
	if mustDigest(t, idx) == mustDigest(t, idx2) {
		t.Fatal("the reconfigured index has the digest of the first")
	}
	// Byte for byte what Build makes of the second spec (ggcr's
	// validate.Index would refuse it for empty annotation maps its
	// serialisation omits anyway).
	if d, d2 := mustDigest(t, idx2), digest(t, s2); d != d2 {
		t.Errorf("reconfigured %s, built from the second spec %s: not the same image", d, d2)
	}
	layers := func(idx v1.ImageIndex) []v1.Hash {
		m, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		img, err := idx.Image(m.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		mf, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		var hs []v1.Hash
		for _, l := range mf.Layers {
			hs = append(hs, l.Digest)
		}
		return hs
	}
	if a, b := layers(idx), layers(idx2); !slices.Equal(a, b) {
		t.Errorf("layers %v, reconfigured %v", a, b)
	}

	var one, both bytes.Buffer
	if err := WriteArchive(&one, idx, ref); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchives(&both, Named{ref, idx}, Named{next, idx2}); err != nil {
		t.Fatal(err)
	}
	// The second image adds its config, manifest and index, not layers.
	if extra := both.Len() - one.Len(); extra > 16<<10 {
		t.Errorf("the second image adds %d bytes: its layers were written again", extra)
	}
	dir := untar(t, both.Bytes())
	for r, want := range map[string]v1.ImageIndex{ref: idx, next: idx2} {
		got, err := LoadArchiveDir(dir, r)
		if err != nil {
			t.Fatal(err)
		}
		if mustDigest(t, got) != mustDigest(t, want) {
			t.Errorf("%s: loaded %s, want %s", r, mustDigest(t, got), mustDigest(t, want))
		}
	}
}
