package ociimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// RefAnnotations name the index in the layout's index.json: the OCI
// annotation for tools that read layouts (skopeo, crane), and
// containerd's for `ctr import` and `docker load`.
func RefAnnotations(ref string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.ref.name": ref,
		"io.containerd.image.name":          ref,
	}
}

// WriteArchive writes idx, named ref, as a tar of an OCI image layout
// (what `ctr import`, `skopeo copy oci-archive:` and `docker load` take).
// The tar is as reproducible as idx: sorted entries, no times, no owners.
func WriteArchive(w io.Writer, idx v1.ImageIndex, ref string) error {
	return WriteArchives(w, Named{Ref: ref, Index: idx})
}

// Named is an image index and the reference it goes by in an archive.
type Named struct {
	Ref   string
	Index v1.ImageIndex
}

// WriteArchives is WriteArchive of several indexes into one tar, each
// named in its index.json; a blob they share is written once (and a
// layer compressed once more for that only).
func WriteArchives(w io.Writer, images ...Named) error {
	dir, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	top := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, n := range images {
		top = mutate.AppendManifests(top, mutate.IndexAddendum{Add: n.Index, Descriptor: v1.Descriptor{Annotations: RefAnnotations(n.Ref)}})
	}
	if _, err := layout.Write(dir, top); err != nil {
		return err
	}
	return TarDir(w, dir)
}

// Unpack extracts a WriteArchive tar (directories and regular files
// only) into dir, for LoadArchiveDir.
func Unpack(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(filepath.FromSlash(h.Name)) {
			return fmt.Errorf("unpack: %q leaves the directory", h.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			err = writeFile(p, tr)
		default:
			err = fmt.Errorf("unpack: %s: not a file or a directory", h.Name)
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(p string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// LoadArchiveDir reads the index named ref from dir, an unpacked
// WriteArchive tar.
func LoadArchiveDir(dir, ref string) (v1.ImageIndex, error) {
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] == ref {
			return top.ImageIndex(d.Digest)
		}
	}
	return nil, fmt.Errorf("%s: no index named %s", dir, ref)
}

// TarDir archives dir's tree (an image layout WriteArchive or the caller
// wrote); filepath.WalkDir visits in lexical order.
func TarDir(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if d.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, st.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
