// Package suite is a Kubernetes e2e test binary that holds only the
// sig-scheduling specs (test/e2e/scheduling) and the DRA specs (test/e2e/dra)
// of the pinned Kubernetes version.
//
// Why not upstream's e2e.test: it links every SIG's specs (storage, network,
// cloud providers) and takes far longer to build; usher only answers to the
// scheduling and DRA ones. The flag handling and the ginkgo configuration follow
// test/e2e/e2e_test.go and test/e2e/e2e.go of the same version, so the specs
// see the same framework they see upstream.
//
// e2e/build-binaries.sh e2e-test copies this file into a throwaway wrapper
// module (with the staging-module replaces the other binaries use) and builds
// it with `go test -c`; see e2e/conformance/run.py for how it is run.
package suite

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/logs"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	utilnet "k8s.io/utils/net"

	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	e2enode "k8s.io/kubernetes/test/e2e/framework/node"

	// define and freeze feature constants, as upstream does before the specs
	_ "k8s.io/kubernetes/test/e2e/feature"

	// the only test sources: sig-scheduling and DRA (sig-node)
	_ "k8s.io/kubernetes/test/e2e/dra"
	_ "k8s.io/kubernetes/test/e2e/scheduling"

	// the manifests the DRA specs deploy (dra/dra-test-driver-proxy.yaml), embedded as upstream's e2e.test does
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"

	// reconfigure the framework exactly as upstream's e2e.test does
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"

	// logging flags (-v) on the command line
	_ "k8s.io/component-base/logs/testinit"
)

func TestMain(m *testing.M) {
	var versionFlag bool
	flag.CommandLine.BoolVar(&versionFlag, "version", false, "Displays version information.")
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()

	if versionFlag {
		fmt.Printf("%s\n", version.Get())
		os.Exit(0)
	}
	if flag.CommandLine.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown additional command line arguments: %s", flag.CommandLine.Args())
		os.Exit(1)
	}
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

// The part of upstream's setupSuite the scheduling specs depend on:
// SchedulerPriorities skips unless TestContext.CloudConfig.NumNodes >= 2, and
// predicates ask TestContext.ClusterIsIPv6(). Upstream's namespace cleanup,
// system-pod waits and image pre-pulling do not apply to a fresh kwok cluster.
var _ = ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "Error loading client")
	timeouts := framework.NewTimeoutContext()
	framework.ExpectNoError(e2enode.WaitForAllNodesSchedulable(ctx, c, timeouts.NodeSchedulable))
	return nil
}, func(ctx context.Context, _ []byte) {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "Error loading client")
	if framework.TestContext.CloudConfig.NumNodes == framework.DefaultNumNodes {
		nodes, err := e2enode.GetReadySchedulableNodes(ctx, c)
		framework.ExpectNoError(err)
		framework.TestContext.CloudConfig.NumNodes = len(nodes.Items)
	}
	svc, err := c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	framework.ExpectNoError(err, "Failed to get kubernetes service ClusterIP")
	framework.TestContext.IPFamily = "ipv4"
	if utilnet.IsIPv6String(svc.Spec.ClusterIP) {
		framework.TestContext.IPFamily = "ipv6"
	}
	framework.Logf("e2e.test %s; %d schedulable nodes; IP family %s",
		version.Get().GitVersion, framework.TestContext.CloudConfig.NumNodes, framework.TestContext.IPFamily)
})

// TestE2E runs the specs as upstream's RunE2ETests does.
func TestE2E(t *testing.T) {
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "Kubernetes e2e suite: sig-scheduling", suiteConfig, reporterConfig)
}
