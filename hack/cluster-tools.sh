#!/usr/bin/env bash
# Builds the pieces of the e2e control plane from the Go module proxy and Debian,
# into a cache folder outside the clone, keyed by version, so a second run is a
# no-op (a few seconds). Prints the bin directory on stdout; progress on stderr.
#
#   hack/cluster-tools.sh          everything below (but gen-k8s)
#   hack/cluster-tools.sh k8s      kube-apiserver, kube-controller-manager, kube-scheduler,
#                                  kubectl (the e2e runs the README's commands with it)
#   hack/cluster-tools.sh kwok     kwok and its stage configs (bin/kwok-stages-VERSION.yaml)
#   hack/cluster-tools.sh etcd     Debian etcd-server (apt-get), when no etcd is on PATH
#   hack/cluster-tools.sh prometheus
#                                  Debian prometheus (prometheus and promtool), when
#                                  missing: the e2e's Prometheus server (e2e/prometheus_test.go)
#   hack/cluster-tools.sh node     the real node: kubelet and kube-proxy (with k8s), CoreDNS,
#                                  kube-router, Debian containerd, runc, CNI plugins, iptables,
#                                  ipset, conntrack, mmdebstrap (images: hack/node-images.sh)
#   hack/cluster-tools.sh gen-k8s  regenerate e2e/tools/k8s/go.mod (after a version bump)
#
# Wrapper modules: e2e/tools/k8s (k8s.io/kubernetes plus one replace per staging
# module, generated from its go.mod) and e2e/tools/kwok. Cold: ~5-10 min on 2 cores.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
K8S_VERSION=v1.35.4
KWOK_VERSION=v0.8.0
COREDNS_VERSION=v1.15.0     # e2e/tools/coredns/go.mod
KUBE_ROUTER_VERSION=v2.1.0  # e2e/tools/kube-router/go.mod
cache=${FUNCTION_DATABASE_CACHE:-$HOME/.cache/function-database}
bin="$cache/bin"
mkdir -p "$bin"
log() { echo "cluster-tools: $*" >&2; }

# Builds every missing "name:package" of one wrapper module in one go build
# (one process shares the compile graph), into bin/<name>-<version>.
build() { # module-dir version ldflags name:package...
	local dir=$1 version=$2 ldflags=$3
	shift 3
	local missing=() names=() spec name pkg
	for spec in "$@"; do
		name=${spec%%:*} pkg=${spec#*:}
		names+=("$name")
		[ -x "$bin/$name-$version" ] || missing+=("$pkg")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		local tmp start=$SECONDS
		tmp=$(mktemp -d "$bin/.build.XXXXXX")
		log "building ${missing[*]} $version (cold: several minutes)"
		(cd "$root/$dir" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w $ldflags" -o "$tmp/" "${missing[@]}")
		for pkg in "${missing[@]}"; do
			name=${pkg##*/}
			mv "$tmp/$name" "$bin/$name-$version"
		done
		rmdir "$tmp"
		log "built ${missing[*]} in $((SECONDS - start)) s"
		echo "$(date -u +%FT%TZ) built ${missing[*]} $version in $((SECONDS - start)) s" >>"$cache/build-times.log"
	fi
	for name in "${names[@]}"; do ln -sf "$name-$version" "$bin/$name"; done
}

build_k8s() {
	local v=k8s.io/component-base/version c=k8s.io/client-go/pkg/version minor
	minor=${K8S_VERSION#v1.}
	minor=${minor%%.*}
	local ldflags="-X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
	ldflags+=" -X $c.gitVersion=$K8S_VERSION -X $c.gitMajor=1 -X $c.gitMinor=$minor -X $c.gitTreeState=clean"
	build e2e/tools/k8s "$K8S_VERSION" "$ldflags" \
		kube-apiserver:k8s.io/kubernetes/cmd/kube-apiserver \
		kube-controller-manager:k8s.io/kubernetes/cmd/kube-controller-manager \
		kube-scheduler:k8s.io/kubernetes/cmd/kube-scheduler \
		kubectl:k8s.io/kubernetes/cmd/kubectl \
		kubelet:k8s.io/kubernetes/cmd/kubelet \
		kube-proxy:k8s.io/kubernetes/cmd/kube-proxy
}

build_kwok() {
	build e2e/tools/kwok "$KWOK_VERSION" "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
		kwok:sigs.k8s.io/kwok/cmd/kwok
	local stages="$bin/kwok-stages-$KWOK_VERSION.yaml"
	if [ ! -s "$stages" ]; then
		local dir
		dir=$(cd "$root/e2e/tools/kwok" && go mod download -json sigs.k8s.io/kwok | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
		[ -d "$dir/kustomize/stage" ] || { log "no kustomize/stage in the kwok module ($dir)"; exit 1; }
		local f
		for f in node/fast/node-initialize node/heartbeat/node-heartbeat pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
			echo "---"
			cat "$dir/kustomize/stage/$f.yaml"
		done >"$stages.tmp"
		mv "$stages.tmp" "$stages"
	fi
	ln -sf "kwok-stages-$KWOK_VERSION.yaml" "$bin/kwok-stages.yaml"
}

build_node() {
	build e2e/tools/coredns "$COREDNS_VERSION" "" coredns:github.com/example/function-database/e2e/tools/coredns
	build e2e/tools/kube-router "$KUBE_ROUTER_VERSION" "" kube-router:github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
	local pkgs=() p
	for p in containerd runc containernetworking-plugins iptables ipset conntrack mmdebstrap; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || pkgs+=("$p")
	done
	if [ ${#pkgs[@]} -gt 0 ]; then
		local start=$SECONDS
		log "installing Debian ${pkgs[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >&2
		apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >&2
		log "installed in $((SECONDS - start)) s"
	fi
}

install_etcd() {
	local e
	e=$(type -P etcd || true)
	if [ -z "$e" ]; then
		local start=$SECONDS
		log "installing Debian etcd-server"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >&2
		apt-get install -y -qq --no-install-recommends etcd-server >&2
		# Debian's package starts a system etcd on 2379 where systemd runs; ours
		# are started by the tests on free ports, so that one is not needed.
		e=$(type -P etcd)
		log "installed etcd in $((SECONDS - start)) s"
	fi
	ln -sf "$e" "$bin/etcd"
}

# The e2e scrapes the metrics sidecars with a real Prometheus server, which
# the tests start on a free loopback port (e2e/prometheus_test.go), and
# checks alert rules with its promtool. Without systemd the package's postinst
# would start a system Prometheus on :9090 through its init script (and fail
# the install if that failed); with systemd, deb-systemd-invoke would start
# the unit. Both ask policy-rc.d first: one answering 101 (start nothing)
# stands during the install, unless the machine has a policy of its own.
install_prometheus() {
	if type -P prometheus >/dev/null && type -P promtool >/dev/null; then
		return
	fi
	local start=$SECONDS
	log "installing Debian prometheus"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	no_services apt-get install -y -qq --no-install-recommends prometheus >&2
	type -P promtool >/dev/null || { log "no promtool on PATH after installing prometheus"; exit 1; }
	log "installed prometheus in $((SECONDS - start)) s"
}

# no_services COMMAND...: runs COMMAND with a policy-rc.d that lets no
# package start a service; the policy goes when it ends, and on exit if it
# fails. A policy already there (container images ship one) is left alone.
no_services() {
	if [ -e /usr/sbin/policy-rc.d ]; then
		"$@"
		return
	fi
	trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	printf '#!/bin/sh\n# hack/cluster-tools.sh: no service starts while it installs packages\nexit 101\n' >/usr/sbin/policy-rc.d
	chmod 0755 /usr/sbin/policy-rc.d
	"$@"
	rm -f /usr/sbin/policy-rc.d
	trap - EXIT
}

gen_k8s() {
	local mod
	mod=$(cd /tmp && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
	local staging=${K8S_VERSION/#v1./v0.}
	{
		echo "// Code generated by hack/cluster-tools.sh gen-k8s from k8s.io/kubernetes $K8S_VERSION's go.mod. DO NOT EDIT."
		echo "//"
		echo "// Wrapper module: builds kube-apiserver, kube-controller-manager, kube-scheduler,"
		echo "// kubectl, kubelet and kube-proxy"
		echo "// from the Go module proxy. k8s.io/kubernetes replaces its 31 staging modules with"
		echo "// ./staging paths, which a dependency cannot use: pin each to the matching v0 tag."
		echo "module github.com/example/function-database/e2e/tools/k8s"
		echo
		grep -E '^go ' "$mod"
		echo
		grep -E '^godebug ' "$mod" || true
		echo
		echo "tool ("
		echo "	k8s.io/kubernetes/cmd/kube-apiserver"
		echo "	k8s.io/kubernetes/cmd/kube-controller-manager"
		echo "	k8s.io/kubernetes/cmd/kube-proxy"
		echo "	k8s.io/kubernetes/cmd/kube-scheduler"
		echo "	k8s.io/kubernetes/cmd/kubectl"
		echo "	k8s.io/kubernetes/cmd/kubelet"
		echo ")"
		echo
		echo "require k8s.io/kubernetes $K8S_VERSION"
		echo
		echo "replace ("
		sed -n '/^replace (/,/^)/p' "$mod" | grep '=> ./staging' | awk -v v="$staging" '{print "\t" $1 " => " $1 " " v}'
		echo ")"
	} >"$root/e2e/tools/k8s/go.mod"
	rm -f "$root/e2e/tools/k8s/go.sum"
	(cd "$root/e2e/tools/k8s" && GOFLAGS=-mod=mod go mod tidy)
	log "regenerated e2e/tools/k8s/go.mod ($(grep -c "=> k8s.io" "$root/e2e/tools/k8s/go.mod") replaces)"
}

start=$SECONDS
case ${1:-all} in
all) install_etcd; install_prometheus; build_kwok; build_k8s; build_node ;;
node) build_k8s; build_node ;;
k8s) build_k8s ;;
kwok) build_kwok ;;
etcd) install_etcd ;;
prometheus) install_prometheus ;;
gen-k8s) gen_k8s ;;
*) log "unknown target $1"; exit 2 ;;
esac
log "done in $((SECONDS - start)) s"
echo "$bin"
