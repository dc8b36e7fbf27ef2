package cluster

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// entry is what a layer's tar holds under one name.
type entry struct {
	typeflag byte
	mode     int64
	uid, gid int
	data     string
}

// entries reads a layer's files.
func entries(t *testing.T, l v1.Layer) map[string]entry {
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
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := out[h.Name]; dup {
			t.Errorf("%s twice in the layer", h.Name)
		}
		out[h.Name] = entry{typeflag: h.Typeflag, mode: h.Mode, uid: h.Uid, gid: h.Gid, data: string(data)}
	}
}

// TestWriteImage builds an image as the node's images are (a layer of
// files, a layer of one folder) and reads it back from the tarball as ctr
// imports it: under each of its tags, with its config and both layers.
func TestWriteImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "exporter")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	files, err := layerOf(map[string]string{"bin/postgres_exporter": bin})
	if err != nil {
		t.Fatal(err)
	}
	run, err := dirLayer("run/postgresql", 999, 0o3777)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "image.tar")
	cfg := v1.Config{Entrypoint: []string{"/bin/postgres_exporter"}, Env: []string{"A=b"}, StopSignal: "SIGINT"}
	refs := []string{"e2e.local/test:1", "e2e.local/test:1.1"}
	if err := writeImage(path, files, cfg, refs, run); err != nil {
		t.Fatal(err)
	}

	for _, ref := range refs {
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(path, &tag)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != "amd64" {
			t.Errorf("%s: platform %s/%s, want linux/amd64", ref, cf.OS, cf.Architecture)
		}
		if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/bin/postgres_exporter" || cf.Config.StopSignal != "SIGINT" || len(cf.Config.Env) != 1 {
			t.Errorf("%s: config %+v, want the one given", ref, cf.Config)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		if len(layers) != 2 {
			t.Fatalf("%s: %d layers, want 2", ref, len(layers))
		}

		// The files, 0755, with their parent folder (root's, 0755: a
		// non-root user must traverse it).
		got := entries(t, layers[0])
		want := map[string]entry{
			"bin/":                  {typeflag: tar.TypeDir, mode: 0o755},
			"bin/postgres_exporter": {typeflag: tar.TypeReg, mode: 0o755, data: "#!binary"},
		}
		if len(got) != len(want) {
			t.Errorf("%s: first layer %v, want %v", ref, got, want)
		}
		for n, w := range want {
			if got[n] != w {
				t.Errorf("%s: %s is %+v, want %+v", ref, n, got[n], w)
			}
		}

		// The folder, its parents root's.
		got = entries(t, layers[1])
		want = map[string]entry{
			"run/":            {typeflag: tar.TypeDir, mode: 0o755},
			"run/postgresql/": {typeflag: tar.TypeDir, mode: 0o3777, uid: 999, gid: 999},
		}
		if len(got) != len(want) {
			t.Errorf("%s: second layer %v, want %v", ref, got, want)
		}
		for n, w := range want {
			if got[n] != w {
				t.Errorf("%s: %s is %+v, want %+v", ref, n, got[n], w)
			}
		}
	}
}

// TestLayerOfMissingFile: a file that is not there fails the layer (at
// its first read), not the image silently.
func TestLayerOfMissingFile(t *testing.T) {
	l, err := layerOf(map[string]string{"pause": filepath.Join(t.TempDir(), "none")})
	if err == nil {
		_, err = l.Digest()
	}
	if err == nil {
		t.Fatal("a layer of a missing file: no error")
	}
}

func TestLastLine(t *testing.T) {
	for in, want := range map[string]string{
		"/cache/images\n":                         "/cache/images",
		"building...\nstill\n/cache/images\n\n  ": "/cache/images",
		"one": "one",
		"":    "",
	} {
		if got := lastLine(in); got != want {
			t.Errorf("lastLine(%q) = %q, want %q", in, got, want)
		}
	}
}
