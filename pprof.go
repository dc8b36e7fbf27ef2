//go:build pprof

package main

import (
	"net/http"
	_ "net/http/pprof" //nolint:gosec // only in binaries built with -tags pprof, for profiling under load
	"os"
	"time"
)

// Built with -tags pprof (hack/perf.sh --profile-load), the function serves
// net/http/pprof on $FUNCTION_PPROF_ADDRESS (a loopback address) so the whole
// process, gRPC and protobuf included, can be profiled under load.
func init() {
	addr := os.Getenv("FUNCTION_PPROF_ADDRESS")
	if addr == "" {
		return
	}
	go func() {
		srv := &http.Server{Addr: addr, ReadHeaderTimeout: 10 * time.Second}
		_ = srv.ListenAndServe()
	}()
}
