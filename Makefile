# Developer workflows; each target calls a hack/ script or go test.
#   make tools                          build the pinned crossplane CLI, Crossplane core, crane (cached)
#   make render [XR=example/xrs/backup.yaml] [ARGS='-o example/observed']
#   make package                        _output/function-database-{amd64,arm64}.xpkg, _output/configuration-database.xpkg (no Docker)
#   make push FUNCTION_REF=xpkg.example.test/acme/function-database:v0.1.0 [CONFIGURATION_REF=xpkg.example.test/acme/configuration-database:v0.1.0]
#   make test-render / make test-pkg    render goldens + validate / package round trip

XR ?= example/xr.yaml
ARGS ?=
GO_TEST ?= go test -count=1 -timeout=30m

.PHONY: tools render package push test-render test-pkg

tools:
	hack/tools.sh

render:
	hack/render.sh $(XR) $(ARGS)

package:
	hack/package.sh

push: package
	hack/push.sh $(FUNCTION_REF) $(CONFIGURATION_REF)

test-render: tools
	$(GO_TEST) ./test/render/

test-pkg: tools
	$(GO_TEST) ./test/pkg/
