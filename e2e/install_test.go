//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/example/function-database/e2e/internal/crossplane"
	"github.com/example/function-database/e2e/internal/kube"
	"github.com/example/function-database/e2e/internal/proc"
)

// installSection is the README section a platform team follows to install
// the packages; the suite installs them by running its commands.
const installSection = "## Install"

// readmeBlocks reads the sh blocks of one README section, in order, each
// as its text.
func readmeBlocks(readme, section string) ([]string, error) {
	f, err := os.Open(readme)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	var block *strings.Builder
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == section:
			in = true
		case in && strings.HasPrefix(line, "## "):
			return out, sc.Err()
		case in && block == nil && line == "```sh":
			block = &strings.Builder{}
		case in && block != nil && line == "```":
			out = append(out, block.String())
			block = nil
		case in && block != nil:
			block.WriteString(line + "\n")
		}
	}
	return out, sc.Err()
}

// registryIP is where the README's registry name points during its
// install: a loopback address of its own, so that the name's port 443 is
// free whatever else listens here.
const registryIP = "127.0.0.2"

// readmeInstall runs README's Install section on the fresh cluster, every
// command unchanged and in order, each block as one bash script with
// errexit (a failing command stops it), from the repository root with the
// pinned kubectl and crossplane CLI on PATH. What only a test needs is
// around it, never in it:
//   - the README pushes to xpkg.example.test: the blocks run in a mount
//     namespace of their own whose /etc/hosts points that name at
//     registryIP, where the suite's registry answers under that name
//     (ServeAs), trusted through SSL_CERT_FILE; the push is the only
//     place v0.1.0 of either package comes from;
//   - core pulls through the suite's ImageConfig (preparePackages), and
//     servePackages runs beside the blocks as a function runtime would, so
//     that README's kubectl wait for a Healthy Configuration can pass.
//
// The Database the section applies last is then checked present and
// deleted (install), so the scenarios start from an installed, empty
// cluster.
func (s *suite) readmeInstall(ctx context.Context) error {
	blocks, err := readmeBlocks(filepath.Join(s.root, "README.md"), installSection)
	if err != nil {
		return err
	}
	if len(blocks) == 0 {
		return fmt.Errorf("no sh blocks in README.md's %q", installSection)
	}
	host := strings.TrimSuffix(pkgHost, "/")
	if err := s.reg.ServeAs(host, registryIP); err != nil {
		return fmt.Errorf("registry as %s: %w", host, err)
	}
	dir := filepath.Join(s.dir, "install")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	hosts, err := os.ReadFile("/etc/hosts")
	if err != nil {
		return err
	}
	hostsFile := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hostsFile, append(hosts, []byte("\n"+registryIP+" "+host+"\n")...), 0o644); err != nil {
		return err
	}
	logPath := filepath.Join(s.dir, "logs", "install.log")

	// A runtime that gives up stops the blocks (README's wait would
	// otherwise wait its 10 minutes).
	sctx, stop := context.WithTimeout(ctx, 15*time.Minute)
	defer stop()
	var serveErr error
	served := make(chan struct{})
	go func() {
		if serveErr = s.xp.ServePackages(sctx); serveErr != nil {
			stop()
		}
		close(served)
	}()
	for i, b := range blocks {
		t0 := time.Now()
		script := filepath.Join(dir, fmt.Sprintf("block-%d.sh", i+1))
		if err := os.WriteFile(script, []byte(b), 0o644); err != nil {
			return err
		}
		if err := s.runIsolated(sctx, logPath, hostsFile, script); err != nil {
			stop()
			<-served
			if serveErr != nil {
				err = fmt.Errorf("%w (and the runtime: %s)", err, serveErr.Error())
			}
			return fmt.Errorf("README.md %q, block %d: %w\n%s\n%s", installSection, i+1, err, b, proc.TailFile(logPath, 40))
		}
		s.installed = append(s.installed, installedBlock{text: b, took: time.Since(t0)})
		logf("README install block %d of %d ran verbatim (%s)", i+1, len(blocks), time.Since(t0).Round(time.Millisecond))
	}
	<-served
	return serveErr
}

// installedBlock is one README block readmeInstall ran, successfully.
type installedBlock struct {
	text string
	took time.Duration
}

// installVerbatim is TestOperate/InstallVerbatim: the cluster every
// scenario ran on was installed by README's Install section as it reads
// now, every block run to its end, and what it installed is what README
// names: the Configuration's package is the one its block applies, and the
// Configuration and its Function are Installed and Healthy.
func (s *suite) installVerbatim(t *testing.T) {
	blocks, err := readmeBlocks(filepath.Join(s.root, "README.md"), installSection)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.installed) != len(blocks) {
		t.Fatalf("the suite's install ran %d of README's %d Install blocks", len(s.installed), len(blocks))
	}
	for i, b := range blocks {
		if s.installed[i].text != b {
			t.Errorf("block %d ran is not README's:\n%s\nREADME:\n%s", i+1, s.installed[i].text, b)
		}
		t.Logf("block %d (%d lines) ran in %s", i+1, strings.Count(b, "\n"), s.installed[i].took.Round(time.Millisecond))
	}
	ctx := context.Background()
	c, err := s.k.Get(ctx, crossplane.GVKConfiguration, "", crossplane.ConfigurationName)
	if err != nil {
		t.Fatal(err)
	}
	pkg := str(c, "spec", "package")
	if !strings.Contains(strings.Join(blocks, ""), "{package: "+pkg+"}") {
		t.Errorf("Configuration %s installs %q, which no README Install block applies", crossplane.ConfigurationName, pkg)
	}
	f, err := s.k.Get(ctx, crossplane.GVKFunction, "", s.xp.FnName)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []*unstructured.Unstructured{c, f} {
		for _, typ := range []string{"Installed", "Healthy"} {
			if got := kube.GetCondition(u, typ); got.Status != "True" {
				t.Errorf("%s %s: %s is %s (%s)", u.GetKind(), u.GetName(), typ, got.Status, got.Message)
			}
		}
	}
	t.Logf("Configuration %s (%s) and Function %s Installed and Healthy", crossplane.ConfigurationName, pkg, s.xp.FnName)
}

// runIsolated runs script with bash -e in a mount namespace whose
// /etc/hosts is hostsFile, against the suite's cluster. SSL_CERT_FILE is
// the registry's CA: Go's TLS then reads it instead of the system's bundle
// file (it still reads the system's certificate folder, which holds no
// certificate for the registry's name). HOME stays the user's: the tools' cache and Go's build
// cache are found there, as for a user.
func (s *suite) runIsolated(ctx context.Context, logPath, hostsFile, script string) error {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "=== %s run: %s\n", time.Now().Format(time.RFC3339), script)
	args := []string{"--mount", "--propagation", "private"}
	if os.Geteuid() != 0 {
		args = append(args, "--map-root-user")
	}
	args = append(args, "--", "bash", "-c", `mount --bind "$1" /etc/hosts && exec bash -e -o pipefail -x "$2"`, "install", hostsFile, script)
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Dir = s.root
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+s.cl.Kubeconfig,
		"PATH="+s.bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"SSL_CERT_FILE="+s.reg.CAFile(),
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	fmt.Fprintf(f, "=== %s end: %v\n", time.Now().Format(time.RFC3339), err)
	return err
}
