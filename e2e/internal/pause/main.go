// Command pause is the sandbox ("pause") container of the e2e real node: it
// holds a pod's namespaces and does nothing else until it is told to stop.
// Kubernetes' own pause is C; this one is built with the suite's Go, so the
// image needs no registry and no C toolchain.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	// As PID 1 of a PID namespace it may inherit orphans: reap them so they
	// do not pile up as zombies.
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	for {
		select {
		case <-sig:
			os.Exit(0)
		case <-chld:
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
