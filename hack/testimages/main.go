// Command testimages packs the images Kubernetes' e2e tests run on the
// lab's real nodes, which cannot be pulled here (no registry, no
// internet), into one tar of an OCI image layout for `ctr images import`:
// a Debian root (debootstrap, hack/test-images.sh) with the static
// agnhost and CoreDNS, tagged as each upstream image the specs name, a
// pause image and a CoreDNS image holding the static binaries alone. hack/test-images.sh runs it.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/flowlb/flowlb/internal/shared/ociimage"
)

// files collects repeated -file /path/in/image=/path/here flags.
type files map[string]string

func (f files) String() string { return fmt.Sprint(len(f), " files") }

func (f files) Set(v string) error {
	dst, src, ok := strings.Cut(v, "=")
	if !ok || !path.IsAbs(dst) || src == "" {
		return fmt.Errorf("want /path/in/image=/path/here, got %q", v)
	}
	f[dst] = src
	return nil
}

// image is one tag of the output and how it runs.
type image struct {
	ref        string
	rootfs     bool // with the Debian root, else the files alone
	entrypoint []string
	cmd        []string
}

// images are the tags the specs of the lab's e2e runs use
// (k8s.io/kubernetes test/utils/image/manifest.go of the pinned
// release), each as the upstream image behaves: agnhost's entrypoint is
// /agnhost, busybox's and jessie-dnsutils' command a shell.
func images(pause string) []image {
	return []image{
		{ref: "registry.k8s.io/e2e-test-images/agnhost:2.56", rootfs: true, entrypoint: []string{"/agnhost"}, cmd: []string{"pause"}},
		{ref: "registry.k8s.io/e2e-test-images/busybox:1.37.0-1", rootfs: true, cmd: []string{"sh"}},
		{ref: "registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7", rootfs: true, cmd: []string{"/bin/sh"}},
		{ref: "registry.k8s.io/e2e-test-images/nginx:1.14-4", rootfs: true, entrypoint: []string{"/agnhost"}, cmd: []string{"netexec", "--http-port=80"}},
		{ref: pause, entrypoint: []string{"/agnhost", "pause"}},
		// The lab's cluster DNS (static, needs nothing of the root).
		{ref: "registry.k8s.io/coredns/coredns:v1.13.1", entrypoint: []string{"/coredns"}},
	}
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testimages:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("testimages", flag.ContinueOnError)
	rootfs := fs.String("rootfs", "", "tar of the Debian root")
	out := fs.String("o", "", "where to write the tar of the OCI image layout")
	pause := fs.String("pause", "registry.k8s.io/pause:3.10.1", "the pause image's reference (containerd's sandbox_image)")
	extra := files{}
	fs.Var(extra, "file", "/path/in/image=/path/here: a file of the top layer (repeat)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rootfs == "" || *out == "" || len(extra) == 0 {
		return fmt.Errorf("-rootfs, -o and at least one -file are needed")
	}
	// Compressed (gzip, fast): an uncompressed media type would still be
	// written compressed by the layout writer.
	base, err := tarball.LayerFromFile(*rootfs, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return fmt.Errorf("root layer: %w", err)
	}
	top, err := filesLayer(extra)
	if err != nil {
		return err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, im := range images(*pause) {
		layers := []v1.Layer{top}
		if im.rootfs {
			layers = []v1.Layer{base, top}
		}
		img, err := build(layers, im)
		if err != nil {
			return fmt.Errorf("%s: %w", im.ref, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Annotations: ociimage.RefAnnotations(im.ref)}})
	}
	dir, err := os.MkdirTemp("", "testimages-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if _, err := layout.Write(dir, idx); err != nil {
		return err
	}
	f, err := os.Create(*out + ".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := ociimage.TarDir(f, dir); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), *out)
}

// build is one image of layers that runs as im says, as root.
func build(layers []v1.Layer, im image) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Entrypoint: im.entrypoint, Cmd: im.cmd, WorkingDir: "/",
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
	return mutate.ConfigFile(img, cf)
}

// filesLayer is a layer of the given files, executable, owned by root,
// in sorted order.
func filesLayer(fs files) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(fs))
	for dst := range fs {
		names = append(names, dst)
	}
	sort.Strings(names)
	for _, dst := range names {
		b, err := os.ReadFile(fs[dst])
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(dst, "/"), Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestSpeed))
}
