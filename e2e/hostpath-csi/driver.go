package main

// The CSI services of one node's driver: Identity, Controller and the one Node
// call a provisioner makes (NodeGetInfo). Volumes are directories under the
// data directory; their sizes are booked against a fixed capacity in
// volumes.json, so a node can run out of space and a restarted driver keeps
// its volumes. Every volume is accessible from this node only, which the
// provisioner turns into the PV's node affinity.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// volumeNames are the names a volume may have: they become directory names.
var volumeNames = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,252}$`)

// defaultVolumeBytes is the size of a volume whose request names none.
const defaultVolumeBytes = 1 << 20

type volume struct {
	ID    string `json:"id"`
	Bytes int64  `json:"bytes"`
	// Claim is "namespace/name" of the PVC when the provisioner passes it (--extra-create-metadata).
	Claim string `json:"claim,omitempty"`
}

type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	name        string
	version     string
	nodeID      string
	topologyKey string
	capacity    int64
	maxVolumes  int64
	dataDir     string

	mu      sync.Mutex
	volumes map[string]volume
}

func newDriver(name, version, nodeID, topologyKey, dataDir string, capacity, maxVolumes int64) (*driver, error) {
	d := &driver{
		name: name, version: version, nodeID: nodeID, topologyKey: topologyKey,
		capacity: capacity, maxVolumes: maxVolumes, dataDir: dataDir, volumes: map[string]volume{},
	}
	if err := os.MkdirAll(d.volumeDir(""), 0o755); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(d.stateFile())
	switch {
	case errors.Is(err, os.ErrNotExist):
		return d, nil
	case err != nil:
		return nil, err
	}
	var saved []volume
	if err := json.Unmarshal(data, &saved); err != nil {
		return nil, fmt.Errorf("%s: %w", d.stateFile(), err)
	}
	for _, v := range saved {
		d.volumes[v.ID] = v
	}
	return d, nil
}

func (d *driver) stateFile() string { return filepath.Join(d.dataDir, "volumes.json") }

func (d *driver) volumeDir(id string) string { return filepath.Join(d.dataDir, "volumes", id) }

// save writes the volume list atomically; the caller holds d.mu.
func (d *driver) save() error {
	list := make([]volume, 0, len(d.volumes))
	for _, v := range d.volumes {
		list = append(list, v)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	tmp := d.stateFile() + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, d.stateFile())
}

// used is the sum of all volumes' sizes; the caller holds d.mu.
func (d *driver) used() int64 {
	var total int64
	for _, v := range d.volumes {
		total += v.Bytes
	}
	return total
}

func (d *driver) topology() *csi.Topology {
	return &csi.Topology{Segments: map[string]string{d.topologyKey: d.nodeID}}
}

// onThisNode: whether a topology segment names this node.
func (d *driver) onThisNode(t *csi.Topology) bool {
	return t.GetSegments()[d.topologyKey] == d.nodeID
}

// ---------------------------------------------------------------- Identity

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.name, VendorVersion: d.version}, nil
}

func (d *driver) GetPluginCapabilities(
	context.Context, *csi.GetPluginCapabilitiesRequest,
) (*csi.GetPluginCapabilitiesResponse, error) {
	service := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		service(csi.PluginCapability_Service_CONTROLLER_SERVICE),
		service(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS),
	}}, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// ---------------------------------------------------------------- Controller

func (d *driver) ControllerGetCapabilities(
	context.Context, *csi.ControllerGetCapabilitiesRequest,
) (*csi.ControllerGetCapabilitiesResponse, error) {
	rpc := func(t csi.ControllerServiceCapability_RPC_Type) *csi.ControllerServiceCapability {
		return &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}},
		}
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{
		rpc(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME),
		rpc(csi.ControllerServiceCapability_RPC_GET_CAPACITY),
	}}, nil
}

func (d *driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name := req.GetName()
	if !volumeNames.MatchString(name) {
		return nil, status.Errorf(codes.InvalidArgument, "volume name %q is not a lowercase DNS-like name", name)
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no volume capabilities")
	}
	if requisite := req.GetAccessibilityRequirements().GetRequisite(); len(requisite) > 0 {
		reachable := false
		for _, t := range requisite {
			reachable = reachable || d.onThisNode(t)
		}
		if !reachable {
			// ResourceExhausted: the provisioner gives the claim back to the scheduler.
			return nil, status.Errorf(codes.ResourceExhausted, "node %s is not among the requisite topologies %v",
				d.nodeID, requisite)
		}
	}
	required, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if limit > 0 && required > limit {
		return nil, status.Errorf(codes.InvalidArgument, "required %d bytes exceeds the limit of %d", required, limit)
	}
	size := required
	if size == 0 {
		size = min(limit, defaultVolumeBytes)
		if size == 0 {
			size = defaultVolumeBytes
		}
	}
	claim := ""
	if ns, pvc := req.GetParameters()["csi.storage.k8s.io/pvc/namespace"], req.GetParameters()["csi.storage.k8s.io/pvc/name"]; pvc != "" {
		claim = ns + "/" + pvc
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if existing, ok := d.volumes[name]; ok {
		if existing.Bytes < required || (limit > 0 && existing.Bytes > limit) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes", name, existing.Bytes)
		}
		return d.created(existing), nil
	}
	if free := d.capacity - d.used(); size > free {
		return nil, status.Errorf(codes.ResourceExhausted, "node %s has %d of %d bytes free, %d requested",
			d.nodeID, free, d.capacity, size)
	}
	if err := os.Mkdir(d.volumeDir(name), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, status.Errorf(codes.Internal, "creating the volume's directory: %v", err)
	}
	v := volume{ID: name, Bytes: size, Claim: claim}
	d.volumes[name] = v
	if err := d.save(); err != nil {
		delete(d.volumes, name)
		_ = os.RemoveAll(d.volumeDir(name))
		return nil, status.Errorf(codes.Internal, "saving the volume list: %v", err)
	}
	return d.created(v), nil
}

func (d *driver) created(v volume) *csi.CreateVolumeResponse {
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      v.ID,
		CapacityBytes: v.Bytes,
		// Copied into the PV's spec.csi.volumeAttributes: which instance made it, and where.
		VolumeContext:      map[string]string{"node": d.nodeID, "path": d.volumeDir(v.ID)},
		AccessibleTopology: []*csi.Topology{d.topology()},
	}}
}

func (d *driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if !volumeNames.MatchString(id) {
		return nil, status.Errorf(codes.InvalidArgument, "volume id %q is not a lowercase DNS-like name", id)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.volumes[id]; !ok {
		return &csi.DeleteVolumeResponse{}, nil // deleting is idempotent
	}
	if err := os.RemoveAll(d.volumeDir(id)); err != nil {
		return nil, status.Errorf(codes.Internal, "removing the volume's directory: %v", err)
	}
	delete(d.volumes, id)
	if err := d.save(); err != nil {
		return nil, status.Errorf(codes.Internal, "saving the volume list: %v", err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *driver) ValidateVolumeCapabilities(
	_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest,
) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	d.mu.Lock()
	_, ok := d.volumes[req.GetVolumeId()]
	d.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no volume %q", req.GetVolumeId())
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: req.GetVolumeCapabilities(),
	}}, nil
}

func (d *driver) GetCapacity(_ context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if t := req.GetAccessibleTopology(); t != nil && !d.onThisNode(t) {
		return &csi.GetCapacityResponse{AvailableCapacity: 0}, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return &csi.GetCapacityResponse{AvailableCapacity: d.capacity - d.used()}, nil
}

// ---------------------------------------------------------------- Node

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             d.nodeID,
		MaxVolumesPerNode:  d.maxVolumes,
		AccessibleTopology: d.topology(),
	}, nil
}

func (d *driver) NodeGetCapabilities(
	context.Context, *csi.NodeGetCapabilitiesRequest,
) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}
