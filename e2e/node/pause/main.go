// pause: the process that holds a pod sandbox's namespaces on the harness's real node (e2e/node),
// as Kubernetes' own pause does: it waits for SIGINT or SIGTERM and exits 0, and reaps the zombies
// it inherits as PID 1. Built into an image FROM scratch by e2e/image/build.sh pause, so the node
// needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
