// hostpathplugin, proxy mode only: what Kubernetes' DRA e2e specs run of
// registry.k8s.io/sig-storage/hostpathplugin on a real node, built here because the Go module
// proxy this machine reaches refuses github.com/kubernetes-csi/csi-driver-host-path (403).
//
// Upstream, hostpathplugin is the CSI hostpath driver; with --proxy-endpoint it is only a socket
// pair (internal/proxy): it listens on --endpoint, the Unix socket the kubelet dials (plugin
// registration, then DRA's gRPC), and on --proxy-endpoint (tcp://:PORT), which e2e.test dials
// through the API server's port-forwarding, keeping several connections open in advance
// (test/e2e/storage/drivers/proxy). Each connection the kubelet opens is paired with the next
// waiting TCP one and bytes are copied both ways until either side closes; e2e.test serves the
// driver itself. e2e.test starts this with `/hostpathplugin --v=5 --endpoint=... --proxy-endpoint=...`
// by exec in a pod (test/e2e/dra/utils/deploy.go) and runs it again when the exec ends, so:
//
//   - the TCP port is bound first: when it is taken (an earlier run still alive), this run fails
//     before it replaces the earlier run's Unix socket, which stays served;
//   - a socket file left behind (a SIGKILLed run leaves one) is removed before listening;
//   - on SIGTERM, SIGHUP, SIGINT or SIGQUIT it removes its socket, unless another run has put its
//     own at that path since;
//   - a failed accept is retried (with backoff) rather than ending the proxy while the process,
//     and so the exec that e2e.test watches, lives on.
//
// Stdlib only; built by e2e/image/build.sh hostpathplugin into an image with a shell and
// coreutils, which the specs also exec in the pod.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

var verbosity = flag.Int("v", 0, "log verbosity, as klog's: 3 logs each connection, 5 each copy's end")

// parseEndpoint splits "unix://PATH" or "tcp://ADDRESS"; anything else is a Unix socket's path,
// as upstream's internal/endpoint.Parse has it.
func parseEndpoint(endpoint string) (network, address string, err error) {
	for _, network := range []string{"unix", "tcp"} {
		if prefix := network + "://"; strings.HasPrefix(strings.ToLower(endpoint), prefix) {
			if address = endpoint[len(prefix):]; address == "" {
				return "", "", fmt.Errorf("invalid endpoint %q", endpoint)
			}
			return network, address, nil
		}
	}
	return "unix", endpoint, nil
}

// socket is a listening Unix socket and the file it made, which is removed on close only while
// it is still that file.
type socket struct {
	*net.UnixListener
	path string
	file os.FileInfo
}

func (s *socket) Close() error {
	err := s.UnixListener.Close()
	if now, statErr := os.Stat(s.path); statErr == nil && os.SameFile(now, s.file) {
		_ = os.Remove(s.path)
	}
	return err
}

func listen(endpoint string) (net.Listener, error) {
	network, address, err := parseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if network == "tcp" {
		return net.Listen(network, address)
	}
	if err := os.Remove(address); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove the old socket: %w", err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: address, Net: "unix"})
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(false)
	file, err := os.Stat(address)
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	return &socket{UnixListener: l, path: address, file: file}, nil
}

// accept returns l's next connection, or nil once l is closed.
func accept(l net.Listener, endpoint string) net.Conn {
	delay := 5 * time.Millisecond
	for {
		conn, err := l.Accept()
		if err == nil {
			return conn
		}
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		log.Printf("accept on %s: %v; again in %v", endpoint, err, delay)
		time.Sleep(delay)
		delay = min(2*delay, time.Second)
	}
}

// serve pairs each connection on the kubelet's side with the next one on e2e.test's side. It
// blocks on the kubelet's side: the kernel completes e2e.test's connections meanwhile, and
// they wait in the TCP listener's backlog.
func serve(kubelet, proxy net.Listener, endpoint, proxyEndpoint string) {
	for {
		c1 := accept(kubelet, endpoint)
		if c1 == nil {
			return
		}
		c2 := accept(proxy, proxyEndpoint)
		if c2 == nil {
			_ = c1.Close()
			return
		}
		if *verbosity >= 3 {
			log.Printf("connected %s and %s", endpoint, proxyEndpoint)
		}
		go pipe(c1, c2, endpoint, proxyEndpoint)
		go pipe(c2, c1, proxyEndpoint, endpoint)
	}
}

// pipe copies until from ends, then closes to: the other direction's copy then ends too.
func pipe(from, to net.Conn, fromEndpoint, toEndpoint string) {
	defer to.Close()
	n, err := io.Copy(to, from)
	if *verbosity >= 5 {
		log.Printf("copied %s -> %s: %d bytes, %v", fromEndpoint, toEndpoint, n, err)
	}
}

func run() error {
	endpoint := flag.String("endpoint", "", "the Unix socket to listen on (unix://PATH or PATH)")
	proxyEndpoint := flag.String("proxy-endpoint", "", "the second socket to listen on, e.g. tcp://:9000")
	version := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *version {
		fmt.Println("hostpathplugin proxy-only (usher e2e/dra-proxy)")
		return nil
	}
	if *endpoint == "" || *proxyEndpoint == "" {
		return errors.New("--endpoint and --proxy-endpoint are both required: only the proxy mode exists here")
	}
	proxy, err := listen(*proxyEndpoint)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *proxyEndpoint, err)
	}
	defer proxy.Close()
	kubelet, err := listen(*endpoint)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *endpoint, err)
	}
	defer kubelet.Close()
	log.Printf("proxy listening on %s and %s", *endpoint, *proxyEndpoint)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT)
	go serve(kubelet, proxy, *endpoint, *proxyEndpoint)
	log.Printf("%v: shutting down", <-signals)
	return nil
}

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if err := run(); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}
