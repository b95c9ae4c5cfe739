// Command image packs already built static flowlb binaries into a
// multi-arch OCI image, written as a tar of an OCI image layout, without
// a container daemon or a base image. `make image` runs it; see
// docs/operations.md ("Image").
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/flowlb/flowlb/internal/shared/ociimage"
)

// binaries collects repeated -binary os/arch=path flags.
type binaries []ociimage.Binary

func (b *binaries) String() string { return fmt.Sprint(len(*b), " binaries") }

func (b *binaries) Set(v string) error {
	plat, path, ok := strings.Cut(v, "=")
	goos, arch, ok2 := strings.Cut(plat, "/")
	if !ok || !ok2 || goos == "" || arch == "" || path == "" {
		return fmt.Errorf("want os/arch=path, got %q", v)
	}
	content, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	*b = append(*b, ociimage.Binary{OS: goos, Arch: arch, Content: content})
	return nil
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	var s ociimage.Spec
	var bins binaries
	out := fs.String("o", "bin/flowlb-image.tar", "where to write the image (a tar of an OCI image layout)")
	name := fs.String("name", "", "the image's reference, e.g. ghcr.io/flowlb/flowlb:v1.2.3, recorded in the layout's index.json")
	epoch := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "creation time in seconds since the epoch, the commit's (default: $SOURCE_DATE_EPOCH)")
	fs.Var(&bins, "binary", "os/arch=path of a static flowlb binary (repeat per platform)")
	fs.StringVar(&s.Version, "version", "", "the version the binaries were stamped with")
	fs.StringVar(&s.Revision, "revision", "", "the commit they were built from")
	fs.StringVar(&s.Source, "source", "https://github.com/flowlb/flowlb", "the source repository")
	if err := fs.Parse(args); err != nil {
		return err
	}
	secs, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("-created (or $SOURCE_DATE_EPOCH): %q is not seconds since the epoch: a reproducible image takes its time from the commit", *epoch)
	}
	if s.Version == "" || s.Revision == "" || *name == "" {
		return fmt.Errorf("-version, -revision and -name are required")
	}
	s.Created, s.Binaries = time.Unix(secs, 0), bins
	idx, err := ociimage.Build(s)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(*out), ".image-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := ociimage.WriteArchive(tmp, idx, *name); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil { // CreateTemp's 0600 is for secrets
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), *out); err != nil {
		return err
	}
	return summary(stdout, *out, *name, idx)
}

// summary prints what docs/operations.md shows: the index digest, and
// per platform the manifest digest and the compressed and unpacked sizes.
func summary(w io.Writer, out, name string, idx v1.ImageIndex) error {
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s  %s@%s\n", out, name, d)
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return err
		}
		layers, err := img.Layers()
		if err != nil {
			return err
		}
		var packed, unpacked int64
		for _, l := range layers {
			n, err := l.Size()
			if err != nil {
				return err
			}
			u, err := uncompressedSize(l)
			if err != nil {
				return err
			}
			packed, unpacked = packed+n, unpacked+u
		}
		fmt.Fprintf(w, "  %-12s %s  %s compressed, %s unpacked\n", desc.Platform.String(), desc.Digest, mib(packed), mib(unpacked))
	}
	return nil
}

func uncompressedSize(l v1.Layer) (int64, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.Copy(io.Discard, rc)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
