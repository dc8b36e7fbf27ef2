package cluster

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/example/function-database/e2e/internal/pki"
)

// TestProcNames: the first node's processes and logs keep their names, the
// other nodes' carry the node's (one logs folder for all).
func TestProcNames(t *testing.T) {
	c := newCluster(Config{Dir: "/run/e2e"})
	first := &Node{Name: RealNodeName, Dir: filepath.Join(c.Dir, "node"), cl: c, first: true}
	pool := &Node{Name: "pool-node-1", Dir: filepath.Join(c.Dir, "nodes", "pool-node-1"), cl: c}
	for _, tc := range []struct {
		n         *Node
		proc, log string
	}{
		{first, "kubelet", "/run/e2e/logs/node-setup.log"},
		{pool, "kubelet-pool-node-1", "/run/e2e/logs/node-setup-pool-node-1.log"},
	} {
		if got := tc.n.procName("kubelet"); got != tc.proc {
			t.Errorf("%s: procName = %s, want %s", tc.n.Name, got, tc.proc)
		}
		if got := tc.n.log(); got != tc.log {
			t.Errorf("%s: setup log %s, want %s", tc.n.Name, got, tc.log)
		}
	}
	if got, want := pool.Path("containerd", "config.toml"), "/run/e2e/nodes/pool-node-1/containerd/config.toml"; got != want {
		t.Errorf("Path = %s, want %s", got, want)
	}
}

// TestMirrorRegistry: the hosts.toml containerd reads at each pull, in the
// folder its config names (containerd/certs.d).
func TestMirrorRegistry(t *testing.T) {
	n := &Node{Dir: t.TempDir()}
	if err := n.TrustRegistry("127.0.0.1:5000", "/ca/registry.crt"); err != nil {
		t.Fatal(err)
	}
	if err := n.MirrorRegistry("xpkg.example.test", "127.0.0.1:5000", "/ca/registry.crt"); err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]string{
		"127.0.0.1:5000": `server = "https://127.0.0.1:5000"

[host."https://127.0.0.1:5000"]
  capabilities = ["pull", "resolve"]
  ca = "/ca/registry.crt"
`,
		"xpkg.example.test": `server = "https://xpkg.example.test"

[host."https://127.0.0.1:5000"]
  capabilities = ["pull", "resolve"]
  ca = "/ca/registry.crt"
`,
	} {
		b, err := os.ReadFile(n.Path("containerd", "certs.d", host, "hosts.toml"))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != want {
			t.Errorf("%s: hosts.toml\n%s\nwant\n%s", host, b, want)
		}
	}
}

// TestKubeconfig: the kubeconfig a node's components get names the API
// server, the cluster's CA and the client certificate and key written
// beside it, none of them readable by others.
func TestKubeconfig(t *testing.T) {
	c := newCluster(Config{Dir: t.TempDir()})
	c.Host = "https://127.0.0.1:6443"
	c.PKI = &pki.PKI{CACert: "/pki/ca.crt"}
	n := &Node{Name: "pool-node-1", Dir: t.TempDir(), cl: c}
	path, err := n.kubeconfig("kubelet", []byte("CERT"), []byte("KEY"))
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"kubelet.crt": "CERT", "kubelet.key": "KEY"} {
		b, err := os.ReadFile(n.Path(file))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", file, b, err, want)
		}
	}
	for _, f := range []string{"kubelet.crt", "kubelet.key", "kubelet.kubeconfig"} {
		if fi, err := os.Stat(n.Path(f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", f, fi.Mode(), err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
				CA     string `json:"certificate-authority"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			Name string `json:"name"`
			User struct {
				Cert string `json:"client-certificate"`
				Key  string `json:"client-key"`
			} `json:"user"`
		} `json:"users"`
		Contexts []struct {
			Name    string `json:"name"`
			Context struct {
				Cluster string `json:"cluster"`
				User    string `json:"user"`
			} `json:"context"`
		} `json:"contexts"`
		Current string `json:"current-context"`
	}
	if err := yaml.Unmarshal(b, &kc); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	if len(kc.Clusters) != 1 || kc.Clusters[0].Cluster.Server != c.Host || kc.Clusters[0].Cluster.CA != c.PKI.CACert {
		t.Errorf("clusters %+v, want the API server %s with CA %s", kc.Clusters, c.Host, c.PKI.CACert)
	}
	if len(kc.Users) != 1 || kc.Users[0].Name != "kubelet" || kc.Users[0].User.Cert != n.Path("kubelet.crt") || kc.Users[0].User.Key != n.Path("kubelet.key") {
		t.Errorf("users %+v, want kubelet with the files beside", kc.Users)
	}
	if len(kc.Contexts) != 1 || kc.Contexts[0].Name != kc.Current || kc.Contexts[0].Context.User != "kubelet" {
		t.Errorf("contexts %+v (current %q), want one, current, as kubelet", kc.Contexts, kc.Current)
	}
}
