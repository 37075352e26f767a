// Command hostpath-csi is the e2e harness's CSI driver: one instance per kwok
// node, serving the controller side of node-local "hostpath" volumes on a unix
// socket to a csi-provisioner run with --node-deployment next to it.
//
// Why not the Kubernetes CSI hostpath driver: its module is not served by the
// Go module proxy this project builds from. The provisioner, the PV binder and
// the scheduler are the real components; this driver is the small part a
// storage vendor would write (create and delete volumes, report capacity and
// topology), kept honest by doing it on disk. Nothing mounts: kwok nodes have
// no kubelet, so NodeStage/NodePublish are never called.
//
// Built by e2e/build-binaries.sh (target csi); started by e2e/storage.py.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// version is stamped by the build (the hash of this directory's sources).
var version = "dev"

func main() {
	var (
		endpoint    = flag.String("endpoint", "", "unix socket path to serve CSI on (unix:// prefix optional)")
		driverName  = flag.String("drivername", "", "CSI driver name, as in the StorageClass provisioner field")
		nodeID      = flag.String("nodeid", "", "the node this instance serves (its Node object's name)")
		topologyKey = flag.String("topology-key", "", "topology segment key whose value is the node id")
		dataDir     = flag.String("datadir", "", "directory holding the volumes and volumes.json")
		capacity    = flag.Int64("capacity", 0, "bytes available for volumes on this node")
		maxVolumes  = flag.Int64("max-volumes-per-node", 0, "reported by NodeGetInfo; 0 means no limit")
		showVersion = flag.Bool("version", false, "print the version and exit")
	)
	flag.Parse()
	if *showVersion {
		fmt.Println("hostpath-csi", version)
		return
	}
	for name, value := range map[string]string{
		"endpoint": *endpoint, "drivername": *driverName, "nodeid": *nodeID, "topology-key": *topologyKey,
		"datadir": *dataDir,
	} {
		if value == "" {
			log.Fatalf("--%s is required", name)
		}
	}
	if *capacity <= 0 {
		log.Fatal("--capacity must be positive")
	}
	d, err := newDriver(*driverName, version, *nodeID, *topologyKey, *dataDir, *capacity, *maxVolumes)
	if err != nil {
		log.Fatalf("loading %s: %v", *dataDir, err)
	}

	socket := strings.TrimPrefix(*endpoint, "unix://")
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Fatalf("removing a stale socket: %v", err)
	}
	listener, err := net.Listen("unix", socket)
	if err != nil {
		log.Fatalf("listening on %s: %v", socket, err)
	}
	server := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	csi.RegisterIdentityServer(server, d)
	csi.RegisterControllerServer(server, d)
	csi.RegisterNodeServer(server, d)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		timer := time.AfterFunc(5*time.Second, server.Stop)
		server.GracefulStop()
		timer.Stop()
	}()
	log.Printf("%s %s serving node %s on %s (capacity %d bytes, %d volumes in use)",
		*driverName, version, *nodeID, socket, *capacity, len(d.volumes))
	if err := server.Serve(listener); err != nil {
		log.Fatalf("serving: %v", err)
	}
	log.Print("stopped")
}

// logCalls logs every call with its outcome: the driver's log is how a failing test explains itself.
func logCalls(
	ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler,
) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	if err != nil {
		log.Printf("%s(%v) failed after %s: %s", method, req, time.Since(start), status.Convert(err).Message())
	} else {
		log.Printf("%s(%v) -> %v", method, req, resp)
	}
	return resp, err
}
