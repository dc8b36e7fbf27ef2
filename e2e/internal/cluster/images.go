package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/example/function-database/e2e/internal/proc"
)

// importImages makes the pause, PostgreSQL and postgres_exporter images (one
// layer each, no registry) from the repository at root and imports them
// into containerd's k8s.io namespace, where the CRI looks. The PostgreSQL image is cached next to its
// root filesystem; the other two are small enough to make on every run.
func (n *Node) importImages(ctx context.Context, root string) error {
	imgDir := n.Path("images")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return err
	}
	// pause: a static Go binary.
	pauseBin := filepath.Join(imgDir, "pause")
	if err := proc.Run(ctx, n.log(), filepath.Join(root, "e2e"), []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-o", pauseBin, "./internal/pause"); err != nil {
		return fmt.Errorf("go build pause: %w\n%s", err, proc.TailFile(n.log(), 10))
	}
	pauseLayer, err := layerOf(map[string]string{"pause": pauseBin})
	if err != nil {
		return err
	}
	pauseTar := filepath.Join(imgDir, "pause.tar")
	if err := writeImage(pauseTar, pauseLayer, v1.Config{Entrypoint: []string{"/pause"}}, []string{pauseImage}); err != nil {
		return err
	}

	// postgres_exporter: the static binary hack/tools.sh built into the
	// tools folder. No user in the image (the pod's securityContext sets
	// runAsUser), no shell, no /etc: it needs none.
	exporterBin := n.binary("postgres_exporter")
	if !fileExists(exporterBin) {
		return fmt.Errorf("no postgres_exporter in %s: run hack/tools.sh postgres_exporter", n.bin)
	}
	exporterLayer, err := layerOf(map[string]string{"bin/postgres_exporter": exporterBin})
	if err != nil {
		return err
	}
	exporterTar := filepath.Join(imgDir, "postgres-exporter.tar")
	if err := writeImage(exporterTar, exporterLayer, v1.Config{Entrypoint: []string{"/bin/postgres_exporter"}}, []string{ExporterImage}); err != nil {
		return err
	}

	// PostgreSQL: the rootfs from hack/node-images.sh, laid out like the
	// official image; its server binaries on PATH as there.
	out, err := proc.Output(ctx, n.log(), root, "bash", "hack/node-images.sh")
	if err != nil {
		return fmt.Errorf("hack/node-images.sh: %w\n%s", err, proc.TailFile(n.log(), 10))
	}
	rootfs, err := filepath.EvalSymlinks(filepath.Join(strings.TrimSpace(lastLine(out)), "postgres-15.tar"))
	if err != nil {
		return err
	}
	pgTar := strings.TrimSuffix(rootfs, ".tar") + ".image.tar"
	if !fileExists(pgTar) {
		layer, err := tarball.LayerFromFile(rootfs)
		if err != nil {
			return err
		}
		cfg := v1.Config{
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/lib/postgresql/15/bin",
				"LANG=C.UTF-8",
				"PGDATA=/var/lib/postgresql/data",
			},
			Cmd:        []string{"postgres"},
			StopSignal: "SIGINT",
		}
		// mmdebstrap empties /run at the end: the socket folder of the
		// official image (postgres-owned, sticky, world-writable) goes in a
		// layer of its own.
		run, err := dirLayer("run/postgresql", 999, 0o3777)
		if err != nil {
			return err
		}
		if err := writeImage(pgTar+".partial", layer, cfg, []string{PostgresImage, PostgresMinor}, run); err != nil {
			return err
		}
		if err := os.Rename(pgTar+".partial", pgTar); err != nil {
			return err
		}
	}
	n.tars = []string{pauseTar, exporterTar, pgTar}
	return n.importTars(ctx)
}

// importTars imports n.tars into containerd's k8s.io namespace, where the
// CRI looks.
func (n *Node) importTars(ctx context.Context) error {
	for _, tar := range n.tars {
		if err := n.sh(ctx, "ctr", "--address", n.sock, "-n", "k8s.io", "images", "import", "--all-platforms", tar); err != nil {
			return err
		}
	}
	return nil
}

// layerOf makes a layer of files (name in the image → path here), mode 0755,
// with an entry for each parent folder (root-owned, 0755): without one the
// unpacker makes it with modes of its own choosing, and a non-root user must
// be able to traverse it.
func layerOf(files map[string]string) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (rc io.ReadCloser, err error) {
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			dirs := map[string]bool{}
			for name, path := range files {
				for i := range len(name) {
					if name[i] != '/' || dirs[name[:i+1]] {
						continue
					}
					dirs[name[:i+1]] = true
					if err := tw.WriteHeader(&tar.Header{Name: name[:i+1], Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
						pw.CloseWithError(err)
						return
					}
				}
				data, err := os.ReadFile(path)
				if err != nil {
					pw.CloseWithError(err)
					return
				}
				if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
					pw.CloseWithError(err)
					return
				}
				if _, err := tw.Write(data); err != nil {
					pw.CloseWithError(err)
					return
				}
			}
			pw.CloseWithError(tw.Close())
		}()
		return pr, nil
	})
}

// dirLayer makes a layer holding one folder (and its parents, root-owned).
func dirLayer(dir string, uid int, mode int64) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	parts := strings.Split(dir, "/")
	for i := range parts {
		h := &tar.Header{Name: strings.Join(parts[:i+1], "/") + "/", Typeflag: tar.TypeDir, Mode: 0o755}
		if i == len(parts)-1 {
			h.Uid, h.Gid, h.Mode = uid, uid, mode
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

// writeImage writes an image of layer (and more, on top) with the config
// cfg, for linux/amd64, to the tarball at path, tagged with every one of
// refs: what `ctr images import` reads.
func writeImage(path string, layer v1.Layer, cfg v1.Config, refs []string, more ...v1.Layer) error {
	img, err := mutate.AppendLayers(empty.Image, append([]v1.Layer{layer}, more...)...)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Config = cfg
	cf.OS, cf.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tags := map[name.Tag]v1.Image{}
	for _, r := range refs {
		t, err := name.NewTag(r)
		if err != nil {
			return err
		}
		tags[t] = img
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tarball.MultiWrite(tags, f); err != nil {
		return err
	}
	return f.Close()
}

// lastLine is the last line of s, surrounding space aside: what a script
// prints last (hack/node-images.sh, its output folder).
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
