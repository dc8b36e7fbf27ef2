// Package e2e holds the end-to-end suite of function-database: a real control
// plane on one machine (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kwok for a fake node and pods; internal/cluster, which also
// runs the real nodes) with Crossplane core running out of cluster and
// calling the function over mTLS on 127.0.0.1. Core installs the Database
// API and the function through its package manager, by README's Install
// section run verbatim: both packages built with hack/package.sh, pushed
// with hack/push.sh to xpkg.example.test (the suite's registry serving TLS
// under that name, in a mount namespace whose /etc/hosts points it there),
// the Configuration applied and waited for (install_test.go,
// internal/registry, internal/crossplane; docs/packaging.md).
//
// The tests are behind the e2e build tag:
//
//	cd e2e && go test -tags e2e -count=1 -timeout 86m -parallel 2 -v ./...
//
// or hack/e2e.sh from the repository root, which builds the tools first.
// TestBackups, the kwok tests and the tests that disturb the whole cluster
// (TestNodes kills nodes, TestOperate upgrades the function) run one after
// the other; then TestFailover, on a real node of its own (a lane), and
// TestRealNode (lanes_realnode_test.go).
// Environment: E2E_KEEP=1 keeps the temporary folder (logs, PKI, etcd data)
// even when the suite passes; E2E_SKIP_TOOLS=1 skips calling the tool scripts
// (binaries must already be in the cache); E2E_EXAMPLES=DIR uses another
// folder laid out like example/ (rbac.yaml, xrd.yaml, composition.yaml,
// xr.yaml, legacy/{xrd,composition,claim}.yaml); the Configuration is built
// from its xrd.yaml and composition.yaml; E2E_PARALLEL=1 runs TestFailover
// beside TestRealNode (too much for two cores: lanes_realnode_test.go).
//
// Crossplane core and its RBAC manager run as the ServiceAccounts of
// Crossplane's Helm chart (tokens from the TokenRequest API), with the
// ServiceAccounts, ClusterRoles and ClusterRoleBindings rendered from the
// chart in the crossplane module of the core binary's version, plus
// example/rbac.yaml: never as system:masters.
package e2e
