# Developer workflows. Each target runs the hack/ script (or go test) that CI
# runs: .ci/run execs hack/test.sh, which runs hack/lint.sh, go test, and
# hack/e2e.sh, so a target and CI cannot drift apart.
#   make test                           what CI runs but end to end (hack/test.sh unit): set-up,
#                                       lint, go test -race ./..., benchmarks once, fuzzing briefly
#   make ci                             all of CI (hack/test.sh): make test, then end to end
#   make lint                           gofmt, go vet, shellcheck, golangci-lint, generated files fresh (hack/lint.sh)
#   make generate                       go mod tidy, the input CRD and deepcopy (hack/generate.sh)
#   make render [XR=example/xrs/backup.yaml] [ARGS='-o example/observed']
#   make e2e [E2E_ARGS='-run TestDatabase']   end to end on a real control plane on 127.0.0.1 (hack/e2e.sh)
#   make tools                          build the pinned crossplane CLI, Crossplane core, crane (cached)
#   make package                        _output/function-database-{amd64,arm64}.xpkg, _output/configuration-database.xpkg (no Docker)
#   make push FUNCTION_REF=xpkg.example.test/acme/function-database:v0.1.0 [CONFIGURATION_REF=xpkg.example.test/acme/configuration-database:v0.1.0]
#   make test-render / make test-pkg    render goldens + validate / package round trip
#   make golden                         rewrite every golden file and fixture (review the diff)
#   make perf                           benchmarks and the load comparison against a no-op function (hack/perf.sh)

XR ?= example/xr.yaml
ARGS ?=
E2E_ARGS ?=
GO_TEST ?= go test -count=1 -timeout=30m

.PHONY: test ci lint generate render e2e tools package push test-render test-pkg golden perf

test:
	hack/test.sh unit

ci:
	hack/test.sh

lint:
	hack/lint.sh

generate:
	hack/generate.sh

render:
	hack/render.sh $(XR) $(ARGS)

e2e:
	hack/e2e.sh $(E2E_ARGS)

tools:
	hack/tools.sh

package:
	hack/package.sh

push: package
	hack/push.sh $(FUNCTION_REF) $(CONFIGURATION_REF)

test-render: tools
	$(GO_TEST) ./test/render/

test-pkg: tools
	$(GO_TEST) ./test/pkg/

golden: tools
	go test -count=1 -run 'TestGolden|TestObservedFixtures|TestPerfRequests' -update .
	$(GO_TEST) ./test/render/ -update

perf:
	hack/perf.sh
