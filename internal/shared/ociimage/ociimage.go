// Package ociimage assembles flowlb's container image from already built
// static binaries, with no base image and nothing fetched: a multi-arch
// OCI image index whose bytes depend only on its inputs, so that one
// commit always gives one digest.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where the binary lives in the image, and the default user: not root.
// The agent needs root's capabilities; its manifests ask for them.
const (
	BinaryPath = "/usr/bin/flowlb"
	UID        = 65532
)

// Binary is one platform's flowlb executable.
type Binary struct {
	OS, Arch string
	Content  []byte
}

// Spec is everything the image is made of.
type Spec struct {
	Binaries []Binary
	Version  string    // what `flowlb version` prints
	Revision string    // the commit
	Source   string    // the repository's URL
	Created  time.Time // the commit's time (SOURCE_DATE_EPOCH), not the build's
}

// Labels are the OCI annotations of the image config.
func (s Spec) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    "flowlb",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.version":  s.Version,
		"org.opencontainers.image.revision": s.Revision,
		"org.opencontainers.image.source":   s.Source,
		"org.opencontainers.image.created":  s.Created.UTC().Format(time.RFC3339),
	}
}

// file is one entry of a layer; dirs have a nil body and Dir set.
type file struct {
	name string
	mode int64
	dir  bool
	uid  int
	body []byte
}

// baseFiles are what a program running as UID expects of a system: a
// passwd and group entry (user name lookups, $HOME), a writable /tmp,
// and a state directory it owns for the server's SQLite database. That
// directory is searchable by others: the agent runs as root with no
// CAP_DAC_OVERRIDE and keeps its identity in a volume mounted below it
// (/var/lib/flowlb/agent), which a 0700 parent owned by UID would put
// out of its reach (the server's volume is mounted over it anyway).
func baseFiles() []file {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nflowlb:x:%d:%d:flowlb:/var/lib/flowlb:/sbin/nologin\n", UID, UID)
	group := fmt.Sprintf("root:x:0:\nflowlb:x:%d:\n", UID)
	return []file{
		{name: "etc/", dir: true, mode: 0o755},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "root/", dir: true, mode: 0o700},
		{name: "tmp/", dir: true, mode: 0o1777},
		{name: "var/", dir: true, mode: 0o755},
		{name: "var/lib/", dir: true, mode: 0o755},
		{name: "var/lib/flowlb/", dir: true, mode: 0o755, uid: UID},
	}
}

func binaryFiles(b []byte) []file {
	return []file{
		{name: "usr/", dir: true, mode: 0o755},
		{name: "usr/bin/", dir: true, mode: 0o755},
		{name: BinaryPath[1:], mode: 0o755, body: b},
	}
}

// layerTar writes files as an uncompressed tar with nothing of the
// machine that wrote it: times at the epoch, numeric owners only.
func layerTar(files []file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name:    f.name,
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.uid,
			ModTime: time.Unix(0, 0),
			Format:  tar.FormatPAX,
		}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func layer(files []file) (v1.Layer, error) {
	b, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
}

// Build assembles the image index: per binary, one image of two layers,
// the base (identical on every platform and at every version) and the
// binary.
func Build(s Spec) (v1.ImageIndex, error) {
	if len(s.Binaries) == 0 {
		return nil, fmt.Errorf("no binaries")
	}
	base, err := layer(baseFiles())
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: s.Created.UTC()}
	bins := slices.Clone(s.Binaries)
	sort.Slice(bins, func(i, j int) bool { return bins[i].OS+"/"+bins[i].Arch < bins[j].OS+"/"+bins[j].Arch })
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for i, b := range bins {
		if i > 0 && b.OS == bins[i-1].OS && b.Arch == bins[i-1].Arch {
			return nil, fmt.Errorf("two binaries for %s/%s", b.OS, b.Arch)
		}
		bin, err := layer(binaryFiles(b.Content))
		if err != nil {
			return nil, err
		}
		img, err := assemble(s, created, b.OS, b.Arch, []mutate.Addendum{
			{Layer: base, History: v1.History{Created: created, CreatedBy: "flowlb base: /etc/passwd, /etc/group, /tmp, /var/lib/flowlb", Comment: "ociimage"}},
			{Layer: bin, History: v1.History{Created: created, CreatedBy: "flowlb binary: " + BinaryPath, Comment: "ociimage"}},
		})
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: b.OS, Architecture: b.Arch}},
		})
	}
	return idx, nil
}

// assemble makes one platform's image of layers, with s's runtime
// configuration.
func assemble(s Spec, created v1.Time, os, arch string, layers []mutate.Addendum) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(img, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = os, arch, created
	cf.Config = Config(s)
	return mutate.ConfigFile(img, cf)
}

// Reconfigure returns idx (a Build's) with s's runtime configuration
// (Config(s): its labels) in every platform's image and the same layers:
// another image (another digest) of the same content, as a second
// release of one binary would be, without compressing its layers again.
func Reconfigure(idx v1.ImageIndex, s Spec) (v1.ImageIndex, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	out := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		layers, err := img.Layers()
		if err != nil {
			return nil, err
		}
		if len(layers) != len(cf.History) {
			return nil, fmt.Errorf("image %s: %d layers, %d history entries", d.Digest, len(layers), len(cf.History))
		}
		adds := make([]mutate.Addendum, len(layers))
		for i, l := range layers {
			adds[i] = mutate.Addendum{Layer: l, History: cf.History[i]}
		}
		if img, err = assemble(s, cf.Created, cf.OS, cf.Architecture, adds); err != nil {
			return nil, err
		}
		out = mutate.AppendManifests(out, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: d.Platform}})
	}
	return out, nil
}

// Config is the runtime configuration every platform's image carries.
func Config(s Spec) v1.Config {
	return v1.Config{
		Entrypoint: []string{BinaryPath},
		Env:        []string{"PATH=/usr/bin"},
		User:       fmt.Sprintf("%d:%d", UID, UID),
		WorkingDir: "/",
		Labels:     s.Labels(),
	}
}
